"""The affect plane's PostgreSQL schema: an append-only list of migrations.

- ``affect_current``: one row per live key — the newest revision's record
  (canonical JSON text), its scope as one column per lattice axis, ``revision``
  and ``recorded_at``. Serves ``get``, ``get_many``, ``list`` and the revision
  checks (its rows are what writers lock).
- ``affect_history``: every revision of every live key, newest included,
  ``PRIMARY KEY (key, revision)``: a history page is a backward range scan.
- ``affect_idempotency``: the replay ledger.

A btree ``(axis, key)`` per scope axis (partial: keys that carry the axis)
lets each conjunction of a ``list`` filter walk its keys in key order from the
cursor and stop after a page. Keys
are ``COLLATE "C"``: code-point order, the order of the keyset cursor. Records
keep the default TOAST storage: unlike the memory plane's embeddings, affect
JSON compresses, and most records stay under the 2 KB where TOAST starts.

Migration 2: ``affect_current.history_bytes``, the length of every revision the key
keeps (filled from ``affect_history``), and ``affect_quota``, keys and bytes per
tenant kept by triggers on ``affect_current`` (see ``ratatoskr.postgres.quota`` and
``bifrost.quota``).
"""

from __future__ import annotations

from typing import Any

from psycopg import Cursor, sql

from ratatoskr.postgres.migrations import Migration, qualified
from ratatoskr.postgres.scope import AXIS_COLUMNS, scope_column_definitions
from ratatoskr.postgres.store import PlaneTables

__all__ = [
    "CURRENT",
    "HISTORY",
    "LEDGER_TABLE",
    "PLANE",
    "TABLES",
    "USAGE_TABLE",
    "migrations",
]

PLANE = "affect"
CURRENT = "affect_current"
HISTORY = "affect_history"
LEDGER_TABLE = "affect_idempotency"
USAGE_TABLE = "affect_quota"
# The ledger, and the per-tenant usage of the keys (bifrost.quota).
TABLES = PlaneTables(LEDGER_TABLE, USAGE_TABLE, CURRENT, "history_bytes")


def migrations(schema: str) -> list[Migration]:
    """The migrations of an affect store in ``schema``."""
    current = qualified(schema, CURRENT)
    v1 = sql.SQL(
        "CREATE TABLE {current} ("
        ' key text COLLATE "C" PRIMARY KEY, {scope},'
        " revision bigint NOT NULL CHECK (revision >= 1),"
        " record_json text NOT NULL,"
        " recorded_at text NOT NULL);"
        " CREATE TABLE {history} ("
        ' key text COLLATE "C" NOT NULL,'
        " revision bigint NOT NULL CHECK (revision >= 1),"
        " record_json text NOT NULL,"
        " recorded_at text NOT NULL,"
        " PRIMARY KEY (key, revision));"
        " {indexes};"
        " {ledger}"
    ).format(
        current=current,
        scope=scope_column_definitions(),
        history=qualified(schema, HISTORY),
        indexes=sql.SQL("; ").join(
            sql.SQL("CREATE INDEX {i} ON {t} ({c}, key) WHERE {c} IS NOT NULL").format(
                i=sql.Identifier(f"{CURRENT}_{column}"), t=current, c=sql.Identifier(column)
            )
            for column in AXIS_COLUMNS.values()
        ),
        ledger=TABLES.ledger_in(schema).create_sql(),
    )

    def v2(cur: Cursor[Any]) -> None:
        # A key's bytes: the UTF-8 length of each revision's canonical JSON it keeps.
        cur.execute(
            sql.SQL(
                "ALTER TABLE {current} ADD COLUMN history_bytes bigint NOT NULL DEFAULT 0;"
                " UPDATE {current} AS c SET history_bytes = h.b FROM (SELECT key,"
                " sum(octet_length(record_json)) AS b FROM {history} GROUP BY key) AS h"
                " WHERE h.key = c.key"
            ).format(current=current, history=qualified(schema, HISTORY))
        )
        TABLES.usage_in(schema).create(cur)

    return [
        Migration(1, "current state, history, scope columns, ledger", v1),
        Migration(2, "per-tenant usage for quotas", v2),
    ]
