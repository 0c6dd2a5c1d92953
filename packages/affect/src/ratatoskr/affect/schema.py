"""The affect plane's schema: an append-only list of migrations.

- ``affect_current``: one row per live key — the newest revision's verbatim
  record (``record_json``), its scope (``scope_json``, sorted axes), its
  ``revision`` and ``recorded_at``. Served by ``get`` / ``get_many`` / ``list``
  without touching history.
- ``affect_history``: every revision of every live key, ``PRIMARY KEY (key,
  revision)``; the newest revision is also here (history pages read only this
  table). ``history`` is a descending range scan of that key.
- ``affect_scope``: one row per (axis, value) of each live key's *current*
  scope, ``PRIMARY KEY (axis, value, key)``, so ``list`` can walk the keys of
  one scope axis in key order (see ``listing.py``).
- ``affect_idempotency``: the replay ledger (``ratatoskr.sqlite``).

All tables are written only inside one ``BEGIN IMMEDIATE`` transaction per
call, so they never disagree after a commit or a crash.
"""

from __future__ import annotations

from ratatoskr.sqlite import IdempotencyLedger, Migration

PLANE = "affect"
LEDGER = IdempotencyLedger("affect_idempotency")

# Rowid tables (not WITHOUT ROWID) because records are opaque and may be large:
# a WITHOUT ROWID b-tree is best for rows under ~1/20 of a page.
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

MIGRATIONS: list[Migration] = [
    Migration(1, "current state, history, scope index, ledger", _V1 + LEDGER.create_sql()),
]

TABLES: tuple[str, ...] = (
    "affect_current",
    "affect_history",
    "affect_scope",
    LEDGER.table,
)
