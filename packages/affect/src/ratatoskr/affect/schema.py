"""The affect plane's schema: an append-only list of migrations.

Since migration 2 each revision's record is kept once, in history, and a write
adds rows where a b-tree grows cheaply (measured with a WAL hook: a batch of 100
revisions of existing keys writes ~34 pages instead of ~54; benchmarks/README.md):

- ``affect_history``: every revision of every live key, one row each, appended
  in write order: ``id`` is an ``INTEGER PRIMARY KEY`` the store numbers on
  from the largest, so a batch's rows fill new pages at the right edge of the
  table. ``record_json`` is the verbatim record, ``recorded_at`` its stamp,
  ``key_id`` names the key and ``revision`` is the key's revision.
- ``affect_history_key``: the index ``(key_id, revision)`` that ``history``
  walks (a descending range of one key). Its entries are a few bytes (integers,
  not the key's text), so a batch inserts into few of its pages.
- ``affect_current``: one row per live key, ``WITHOUT ROWID`` keyed by ``key``
  (no separate index b-tree): the key's ``key_id``, newest ``revision``,
  ``head`` (the ``id`` of that revision's history row, so ``get`` is two b-tree
  lookups) and ``scope_json`` (the sorted scope of the newest revision). About
  100 bytes a row; a new revision rewrites it in place.
- ``affect_scope``: one row per (axis, value) of each live key's *current*
  scope, ``PRIMARY KEY (axis, value, key)``, so ``list`` can walk the keys of
  one scope axis in key order (see ``listing.py``). A revision with the scope
  of the one before writes nothing here.
- ``affect_idempotency``: the replay ledger (``ratatoskr.sqlite``).
- ``affect_quota`` (migration 3): keys and bytes per tenant (:data:`QUOTA`, kept by
  triggers on ``affect_current``, whose ``history_bytes`` is the length of every
  revision the key keeps, see :mod:`bifrost.quota`), filled from the rows there.

A key's ``key_id`` is the ``id`` of its first revision's history row: unique
among live keys without a counter (that row lives as long as the key does;
``delete_many`` erases a key's rows together). A deleted key's ids may be used
again by later rows; nothing refers to them any more.

Every table is written only inside one ``BEGIN IMMEDIATE`` transaction per
call, so they never disagree after a commit or a crash. Migration 2 rewrites a
v1 file in the transaction of the open that applies it: a failure or a crash
leaves the file at v1, whole.
"""

from __future__ import annotations

import apsw

from ratatoskr.sqlite import IdempotencyLedger, Migration, StorageCorrupt
from ratatoskr.sqlite.quota import TenantUsageTable

PLANE = "affect"
LEDGER = IdempotencyLedger("affect_idempotency")
QUOTA = TenantUsageTable("affect_quota", "affect_current", "history_bytes")

# Schema v1 (kept: migrations are append-only, and a v1 file is upgraded from it).
# The record twice (current and history), a separate index b-tree under each
# rowid table: a batch of 100 revisions wrote ~54 pages.
_V1 = """
CREATE TABLE affect_current (
    key TEXT PRIMARY KEY,
    record_json TEXT NOT NULL,
    scope_json TEXT NOT NULL,
    revision INTEGER NOT NULL CHECK (revision >= 1),
    recorded_at TEXT NOT NULL
);
CREATE TABLE affect_history (
    key TEXT NOT NULL,
    revision INTEGER NOT NULL CHECK (revision >= 1),
    record_json TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    PRIMARY KEY (key, revision)
);
CREATE TABLE affect_scope (
    axis TEXT NOT NULL,
    value TEXT NOT NULL,
    key TEXT NOT NULL,
    PRIMARY KEY (axis, value, key)
) WITHOUT ROWID;
"""

# History stays a rowid table: records are opaque and may be large, and a rowid
# table keeps up to a page of a row in its leaf (a WITHOUT ROWID b-tree ~1/4), and
# appends at its right edge (a table clustered by key took 81-92 pages a batch).
_V2_TABLES = """
CREATE TABLE affect_history (
    id INTEGER PRIMARY KEY,
    key_id INTEGER NOT NULL,
    revision INTEGER NOT NULL CHECK (revision >= 1),
    record_json TEXT NOT NULL,
    recorded_at TEXT NOT NULL
);
CREATE TABLE affect_current (
    key TEXT PRIMARY KEY,
    key_id INTEGER NOT NULL,
    revision INTEGER NOT NULL CHECK (revision >= 1),
    head INTEGER NOT NULL,
    scope_json TEXT NOT NULL
) WITHOUT ROWID;
"""
_V2_INDEX = "CREATE UNIQUE INDEX affect_history_key ON affect_history (key_id, revision);"


def _one(conn: apsw.Connection, sql: str) -> int:
    return int(conn.execute(sql).fetchall()[0][0])  # type: ignore[arg-type]


def _record_once_v2(conn: apsw.Connection) -> None:
    """Rewrite v1's tables into v2's, in the migration's transaction.

    Every history row keeps its rowid as its ``id`` (so the order of writes) and
    its revision, record and stamp; each key's ``key_id`` is the id of its
    revision 1; ``head`` is the history row of the current revision. The copy is
    checked against v1's own invariants before v1's tables are dropped; a file
    that breaks them raises StorageCorrupt and stays at v1.
    """
    conn.execute(
        "ALTER TABLE affect_current RENAME TO affect_current_v1;"
        "ALTER TABLE affect_history RENAME TO affect_history_v1;" + _V2_TABLES
    )
    # In rowid order: the new table is appended to, page after page.
    conn.execute(
        "INSERT INTO affect_history (id, key_id, revision, record_json, recorded_at)"
        " SELECT h.rowid, f.rowid, h.revision, h.record_json, h.recorded_at"
        " FROM affect_history_v1 AS h"
        " JOIN affect_history_v1 AS f ON f.key = h.key AND f.revision = 1"
        " ORDER BY h.rowid"
    )
    # Only a current row whose record and stamp are its newest history row's.
    conn.execute(
        "INSERT INTO affect_current (key, key_id, revision, head, scope_json)"
        " SELECT c.key, f.rowid, c.revision, h.rowid, c.scope_json"
        " FROM affect_current_v1 AS c"
        " JOIN affect_history_v1 AS f ON f.key = c.key AND f.revision = 1"
        " JOIN affect_history_v1 AS h ON h.key = c.key AND h.revision = c.revision"
        " WHERE h.record_json = c.record_json AND h.recorded_at = c.recorded_at"
        " ORDER BY c.key"
    )
    conn.execute(_V2_INDEX)
    copied = (
        _one(conn, "SELECT count(*) FROM affect_history")
        == _one(conn, "SELECT count(*) FROM affect_history_v1")
        and _one(conn, "SELECT count(*) FROM affect_current")
        == _one(conn, "SELECT count(*) FROM affect_current_v1")
        # No history without a live key, none past its key's current revision
        # (through v1's indexes on key).
        and _one(
            conn,
            "SELECT count(*) FROM affect_history_v1 AS h LEFT JOIN affect_current_v1 AS c"
            " ON c.key = h.key WHERE c.key IS NULL OR h.revision > c.revision",
        )
        == 0
    )
    if not copied:
        # Not a file v1 could have written; the upgrade rolls back whole.
        raise StorageCorrupt("affect_current and affect_history of the v1 file disagree")
    conn.execute("DROP TABLE affect_current_v1; DROP TABLE affect_history_v1;")


MIGRATIONS: list[Migration] = [
    Migration(1, "current state, history, scope index, ledger", _V1 + LEDGER.create_sql()),
    Migration(2, "each record once: history appended, current a pointer", _record_once_v2),
    Migration(
        3,
        "per-tenant usage for quotas",
        # A key's bytes: the UTF-8 length of each revision's canonical JSON it keeps.
        "ALTER TABLE affect_current ADD COLUMN history_bytes INTEGER NOT NULL DEFAULT 0;"
        "UPDATE affect_current SET history_bytes = (SELECT"
        " coalesce(sum(length(CAST(h.record_json AS BLOB))), 0) FROM affect_history AS h"
        " WHERE h.key_id = affect_current.key_id);" + QUOTA.create_sql(),
    ),
]

TABLES: tuple[str, ...] = (
    "affect_current",
    "affect_history",
    "affect_scope",
    LEDGER.table,
    QUOTA.table,
)
