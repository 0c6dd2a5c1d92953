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

from collections.abc import Mapping
from typing import Any

from psycopg import Cursor, sql

from bifrost.jsoncodec import canonical_json, json_loads_exact
from bifrost.portability import (
    ExportedKey,
    Held,
    ImportConflict,
    ImportedKeys,
    ImportOutcome,
    OnConflict,
    plan_import,
    same_history,
)
from ratatoskr.affect.postgres import schema as affect_schema
from ratatoskr.postgres.database import PostgresDatabase
from ratatoskr.postgres.scope import AXIS_COLUMNS, conjunction_sql, scope_columns
from ratatoskr.postgres.text import from_db, to_db

__all__ = ["export_page", "import_keys"]

_AXES = tuple(AXIS_COLUMNS.values())
_History = tuple[tuple[int, dict[str, Any], str], ...]


def _histories(cur: Cursor[Any], db: PostgresDatabase, keys: list[str]) -> dict[str, _History]:
    """Every revision of each of the stored ``keys``, oldest first, by stored key."""
    statement = sql.SQL(
        "SELECT key, revision, record_json, recorded_at FROM {t}"
        " WHERE key = ANY(%b) ORDER BY key, revision"
    ).format(t=db.table(affect_schema.HISTORY))
    out: dict[str, list[tuple[int, dict[str, Any], str]]] = {k: [] for k in keys}
    for key, rev, rj, at in cur.execute(statement, (keys,), binary=True).fetchall():
        out[str(key)].append((int(rev), json_loads_exact(str(rj)), str(at)))
    return {k: tuple(v) for k, v in out.items()}


def export_page(
    db: PostgresDatabase, after_key: str | None, limit: int, scope_all: Mapping[str, str]
) -> tuple[list[ExportedKey], str | None]:
    """Up to ``limit`` keys after ``after_key`` in key order whose current scope contains
    ``scope_all``, each with its whole history (one snapshot); and the cursor of the
    next page (None: done)."""
    where, params = conjunction_sql(dict(scope_all))
    statement = sql.SQL(
        "SELECT key, revision FROM {t} WHERE key > %s AND {where} ORDER BY key LIMIT %s"
    ).format(t=db.table(affect_schema.CURRENT), where=where)
    after = "" if after_key is None else to_db(after_key)

    def page(cur: Cursor[Any]) -> tuple[list[Any], dict[str, _History]]:
        rows = cur.execute(statement, (after, *params, limit), binary=True).fetchall()
        return rows, _histories(cur, db, [str(r[0]) for r in rows])

    rows, histories = db.run(page, mode="snapshot")
    out = [ExportedKey(from_db(str(k)), int(rev), histories[str(k)]) for k, rev in rows]
    return out, out[-1].key if len(rows) == limit else None


def import_keys(
    db: PostgresDatabase,
    batch: ImportedKeys,
    on_conflict: OnConflict,
    *,
    allow_scope_change: bool = False,
) -> ImportOutcome:
    """Write ``batch``, each key with its whole history, in one transaction (see the
    module docstring). Raises ImportConflict, ImportScopeChange (nothing written),
    StorageError subclasses."""
    current_t = db.table(affect_schema.CURRENT)
    history_t = db.table(affect_schema.HISTORY)
    keys = [k.key for k in batch.keys]
    stored = {to_db(k): i for i, k in enumerate(keys)}
    lock_sql = sql.SQL("SELECT key FROM {t} WHERE key = ANY(%b) ORDER BY key FOR UPDATE").format(
        t=current_t
    )
    axes = sql.SQL(", ").join(map(sql.Identifier, _AXES))
    insert_current = sql.SQL(
        "INSERT INTO {t} (key, {axes}, revision, record_json, recorded_at, history_bytes)"
        " SELECT * FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[],"
        " %b::bigint[], %b::text[], %b::text[], %b::bigint[])"
        " ON CONFLICT (key) DO NOTHING RETURNING key"
    ).format(t=current_t, axes=axes)
    insert_history = sql.SQL(
        "INSERT INTO {t} (key, revision, record_json, recorded_at)"
        " SELECT * FROM unnest(%b::text[], %b::bigint[], %b::text[], %b::text[])"
    ).format(t=history_t)
    delete_current = sql.SQL("DELETE FROM {t} WHERE key = ANY(%b)").format(t=current_t)
    delete_history = sql.SQL("DELETE FROM {t} WHERE key = ANY(%b)").format(t=history_t)

    def perform(cur: Cursor[Any]) -> ImportOutcome:
        held_keys = [
            str(r[0]) for r in cur.execute(lock_sql, (sorted(stored),), binary=True).fetchall()
        ]
        held = _histories(cur, db, held_keys)
        found: dict[str, Held] = {}
        for key in held_keys:
            imported = batch.keys[stored[key]]
            mine = [(r.revision, _text(r.item.record), r.recorded_at) for r in imported.history]
            theirs = [(rev, _text(rec), at) for rev, rec, at in held[key]]
            found[imported.key] = Held(
                same=same_history(theirs, mine),
                revision=theirs[-1][0],
                rescoped=held[key][-1][1].get("scope") != dict(imported.current.item.scope),
            )
        plan = plan_import(
            keys,
            [k.current.revision for k in batch.keys],
            found,
            on_conflict,
            allow_scope_change=allow_scope_change,
        )
        new, over, outcome = plan.new, plan.over, plan.outcome
        if over:
            gone = sorted(to_db(keys[i]) for i in over)
            cur.execute(delete_current, (gone,))
            cur.execute(delete_history, (gone,))
        chosen = sorted(new + over, key=lambda i: to_db(keys[i]))
        if not chosen:
            return outcome
        heads = [batch.keys[i].current for i in chosen]
        scopes = [scope_columns(h.item.scope) for h in heads]
        cur.execute(
            insert_current,
            (
                [to_db(keys[i]) for i in chosen],
                *([s[a] for s in scopes] for a in range(len(_AXES))),
                [plan.revisions[i] for i in chosen],
                [_text(h.item.record) for h in heads],
                [h.recorded_at for h in heads],
                # What the key counts for in its tenant's usage: every revision it keeps.
                [
                    sum(len(_text(r.item.record).encode("utf-8")) for r in batch.keys[i].history)
                    for i in chosen
                ],
            ),
        )
        if len(cur.fetchall()) != len(chosen):
            # Another writer created one of these keys since the read: a conflict.
            raise ImportConflict(min(chosen))
        revisions = [
            (to_db(keys[i]), r, plan.revisions[i] if r is batch.keys[i].current else r.revision)
            for i in chosen
            for r in batch.keys[i].history
        ]
        cur.execute(
            insert_history,
            (
                [k for k, _r, _n in revisions],
                [n for _k, _r, n in revisions],
                [_text(r.item.record) for _k, r, _n in revisions],
                [r.recorded_at for _k, r, _n in revisions],
            ),
        )
        return outcome

    return db.run(perform, mode="write")


def _text(record: Mapping[str, Any]) -> str:
    """A record as the store keeps it (its canonical JSON)."""
    return canonical_json(dict(record)).decode("utf-8")
