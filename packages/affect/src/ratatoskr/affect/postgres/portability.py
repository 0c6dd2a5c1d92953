"""Export and import of the PostgreSQL affect store (``ratatoskr export`` / ``import``).

**Export** reads keyset pages of keys in key order (``COLLATE "C"``), narrowed by
the scope columns' indexes, each page with every revision of its keys in one
``REPEATABLE READ`` snapshot: a key unchanged for the whole export is read
exactly once, whole. Reads go to the primary and write nothing.

**Import** writes one validated batch (:mod:`bifrost.portability`) in one
transaction: the current rows of the batch's keys are read ``FOR UPDATE`` (in
key order, as writers lock them) with their histories,
:func:`~bifrost.portability.plan_import` decides, and each key written gets
its history rows with their own revisions and ``recorded_at`` (a replaced
key's newest numbered by the plan) and its current row (``ON CONFLICT DO
NOTHING``: a key another writer created after the read is a conflict, and the
batch rolls back); a replaced key's rows are erased first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from psycopg import Cursor, sql

from bifrost import portability
from bifrost.jsoncodec import json_loads_exact
from ratatoskr.affect.postgres import schema as affect_schema
from ratatoskr.postgres.database import PostgresDatabase
from ratatoskr.postgres.scope import conjunction_sql, scope_arrays, scope_column_list
from ratatoskr.postgres.text import from_db, to_db

__all__ = ["export_page", "import_keys"]


def _history_sql(db: PostgresDatabase) -> sql.Composed:
    return sql.SQL(
        "SELECT key, revision, record_json, recorded_at FROM {t}"
        " WHERE key = ANY(%b) ORDER BY key, revision"
    ).format(t=db.table(affect_schema.HISTORY))


def _histories(
    cur: Cursor[Any], statement: sql.Composed, keys: list[str]
) -> dict[str, portability.History]:
    """Every revision of each of the stored ``keys``, oldest first, by stored key."""
    out: dict[str, list[tuple[int, dict[str, Any], str]]] = {k: [] for k in keys}
    for key, rev, rj, at in cur.execute(statement, (keys,), binary=True).fetchall():
        out[str(key)].append((int(rev), json_loads_exact(str(rj)), str(at)))
    return {k: tuple(v) for k, v in out.items()}


def export_page(
    db: PostgresDatabase, after_key: str | None, limit: int, scope_all: Mapping[str, str]
) -> tuple[list[portability.ExportedKey], str | None]:
    """Up to ``limit`` keys after ``after_key`` in key order whose current scope contains
    ``scope_all``, each with its whole history (one snapshot); and the cursor of the
    next page (None: done)."""
    where, params = conjunction_sql(dict(scope_all))
    statement = sql.SQL(
        "SELECT key, revision FROM {t} WHERE key > %s AND {where} ORDER BY key LIMIT %s"
    ).format(t=db.table(affect_schema.CURRENT), where=where)
    after = "" if after_key is None else to_db(after_key)

    history = _history_sql(db)

    def page(cur: Cursor[Any]) -> tuple[list[Any], dict[str, portability.History]]:
        rows = cur.execute(statement, (after, *params, limit), binary=True).fetchall()
        return rows, _histories(cur, history, [str(r[0]) for r in rows])

    rows, histories = db.run(page, mode="snapshot")
    out = [portability.ExportedKey(from_db(str(k)), int(rev), histories[str(k)]) for k, rev in rows]
    return out, out[-1].key if len(rows) == limit else None


class _Statements:
    """The import's statements for the plane's two tables."""

    def __init__(self, db: PostgresDatabase) -> None:
        current_t = db.table(affect_schema.CURRENT)
        history_t = db.table(affect_schema.HISTORY)
        self.lock = sql.SQL(
            "SELECT key FROM {t} WHERE key = ANY(%b) ORDER BY key FOR UPDATE"
        ).format(t=current_t)
        self.history = _history_sql(db)
        self.insert_current = sql.SQL(
            "INSERT INTO {t} (key, {axes}, revision, record_json, recorded_at, history_bytes)"
            " SELECT * FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[],"
            " %b::bigint[], %b::text[], %b::text[], %b::bigint[])"
            " ON CONFLICT (key) DO NOTHING RETURNING key"
        ).format(t=current_t, axes=scope_column_list())
        self.insert_history = sql.SQL(
            "INSERT INTO {t} (key, revision, record_json, recorded_at)"
            " SELECT * FROM unnest(%b::text[], %b::bigint[], %b::text[], %b::text[])"
        ).format(t=history_t)
        self.delete_current = sql.SQL("DELETE FROM {t} WHERE key = ANY(%b)").format(t=current_t)
        self.delete_history = sql.SQL("DELETE FROM {t} WHERE key = ANY(%b)").format(t=history_t)


class _ImportTx:
    """One import batch's SQL in its transaction (bifrost.portability.KeyImportTx)."""

    def __init__(self, cur: Cursor[Any], statements: _Statements) -> None:
        self._cur = cur
        self._sql = statements

    def held(self, keys: Sequence[str]) -> dict[str, portability.History]:
        locked = self._cur.execute(self._sql.lock, (sorted(map(to_db, keys)),), binary=True)
        held = [str(r[0]) for r in locked.fetchall()]
        return {from_db(k): h for k, h in _histories(self._cur, self._sql.history, held).items()}

    def write(self, batch: portability.ImportedKeys, plan: portability.ImportPlan) -> None:
        cur, keys = self._cur, [k.key for k in batch.keys]
        if plan.over:
            gone = sorted(to_db(keys[i]) for i in plan.over)
            cur.execute(self._sql.delete_current, (gone,))
            cur.execute(self._sql.delete_history, (gone,))
        chosen = sorted(plan.new + plan.over, key=lambda i: to_db(keys[i]))
        heads = [batch.keys[i].current for i in chosen]
        cur.execute(
            self._sql.insert_current,
            (
                [to_db(keys[i]) for i in chosen],
                *scope_arrays([h.item.scope for h in heads]),
                [plan.revisions[i] for i in chosen],
                [portability.record_text(h.item.record) for h in heads],
                [h.recorded_at for h in heads],
                # What the key counts for in its tenant's usage: every revision it keeps.
                [
                    sum(
                        len(portability.record_text(r.item.record).encode("utf-8"))
                        for r in batch.keys[i].history
                    )
                    for i in chosen
                ],
            ),
        )
        if len(cur.fetchall()) != len(chosen):
            # Another writer created one of these keys since the read: a conflict.
            raise portability.ImportConflict(min(chosen))
        revisions = [
            (to_db(keys[i]), r, plan.revisions[i] if r is batch.keys[i].current else r.revision)
            for i in chosen
            for r in batch.keys[i].history
        ]
        cur.execute(
            self._sql.insert_history,
            (
                [k for k, _r, _n in revisions],
                [n for _k, _r, n in revisions],
                [portability.record_text(r.item.record) for _k, r, _n in revisions],
                [r.recorded_at for _k, r, _n in revisions],
            ),
        )


def import_keys(
    db: PostgresDatabase,
    batch: portability.ImportedKeys,
    on_conflict: portability.OnConflict,
    *,
    allow_scope_change: bool = False,
) -> portability.ImportOutcome:
    """``batch`` in one READ COMMITTED write transaction on the primary (a write slot,
    bounded by ``sync_wait``: PostgresDatabase.run). Raises ImportConflict,
    ImportScopeChange (nothing written), StorageError subclasses."""
    statements = _Statements(db)
    return db.run(
        lambda cur: portability.import_key_batch(
            _ImportTx(cur, statements), batch, on_conflict, allow_scope_change=allow_scope_change
        ),
        mode="write",
    )
