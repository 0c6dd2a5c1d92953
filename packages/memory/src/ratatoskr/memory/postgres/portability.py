"""Export and import of the PostgreSQL memory store (``ratatoskr export`` / ``import``).

**Export** reads keyset pages in ``chunk_id`` order (``COLLATE "C"``: the stored
form sorts as the ids do, see :mod:`ratatoskr.postgres.text`), each page one
statement and so one snapshot, narrowed by the scope columns' indexes: a chunk
that exists unchanged for the whole export is read exactly once; a chunk expired
under the store's retention is left out (:data:`~ratatoskr.memory.postgres.retention.LIVE_SQL`,
as every read). Reads go to the primary (a replica may lag), and write nothing.

**Import** writes one validated batch (:mod:`bifrost.portability`) in one
transaction: the rows held under the batch's ids are read ``FOR UPDATE``, the
retention cutoff taken, :func:`~bifrost.portability.plan_import` decides, new
rows are inserted (``ON CONFLICT DO NOTHING``: a row another writer created
after the read is a conflict, and the batch rolls back) and replaced ones (and
expired ones written over) updated, each with its revision (the plan's) and
write time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from psycopg import Cursor, sql

from bifrost.jsoncodec import canonical_json
from bifrost.memory.retention import is_expired
from bifrost.portability import (
    ExportedChunk,
    Held,
    ImportConflict,
    ImportedChunks,
    ImportOutcome,
    OnConflict,
    expired_entries,
    plan_import,
    same_record,
)
from ratatoskr.memory.postgres import schema as memory_schema
from ratatoskr.memory.postgres.retention import LIVE_SQL, cutoff_param
from ratatoskr.memory.records import StoredChunk, stored_forms
from ratatoskr.postgres.database import PostgresDatabase
from ratatoskr.postgres.extension import vector_extension
from ratatoskr.postgres.scope import AXIS_COLUMNS, conjunction_sql, scope_columns
from ratatoskr.postgres.text import from_db, to_db
from ratatoskr.postgres.vector import VectorRows

__all__ = ["export_page", "import_chunks"]

_AXES = tuple(AXIS_COLUMNS.values())
_COLUMNS = "chunk_id, record_json, embedding_key, embedding_f64, revision"


def export_page(
    db: PostgresDatabase,
    after_id: str | None,
    limit: int,
    scope_all: Mapping[str, str],
    cutoff: float | None,
) -> tuple[list[ExportedChunk], str | None]:
    """Up to ``limit`` chunks after ``after_id`` in id order whose scope contains
    ``scope_all``, not expired under ``cutoff`` (None: nothing expires), in one
    statement; and the cursor of the next page (None: done)."""
    where, params = conjunction_sql(dict(scope_all))
    statement = sql.SQL(
        "SELECT " + _COLUMNS + ", updated_at FROM {t}"
        " WHERE chunk_id > %s AND {where} AND {live} ORDER BY chunk_id LIMIT %s"
    ).format(t=db.table(memory_schema.CHUNKS), where=where, live=LIVE_SQL)
    after = "" if after_id is None else to_db(after_id)
    args = (after, *params, cutoff_param(cutoff), limit)
    rows = db.run(lambda cur: cur.execute(statement, args, binary=True).fetchall())
    out = [
        ExportedChunk(
            from_db(str(cid)),
            StoredChunk(str(rj), None if key is None else str(key), blob, int(rev)).record(),
            int(rev),
            float(at),
        )
        for cid, rj, key, blob, rev, at in rows
    ]
    cursor = out[-1].chunk_id if len(rows) == limit else None
    return out, cursor


def import_chunks(
    db: PostgresDatabase,
    batch: ImportedChunks,
    on_conflict: OnConflict,
    *,
    embedding_dim: int,
    cutoff: Callable[[], float | None],
    allow_scope_change: bool = False,
) -> ImportOutcome:
    """Write ``batch`` with its revisions and write times, in one transaction (see the
    module docstring); ``cutoff`` reads the store's retention cutoff. Raises
    ImportConflict, ImportScopeChange (nothing written), StorageError subclasses."""
    items = batch.request.items
    ids = list(batch.request.ids)
    forms, units = stored_forms(items, embedding_dim)
    found = db.run(vector_extension)
    if found is None:
        raise RuntimeError("the vector extension vanished after the schema was created")
    t = db.table(memory_schema.CHUNKS)
    vector = sql.SQL("{}.vector").format(sql.Identifier(found[0]))
    axes = sql.SQL(", ").join(map(sql.Identifier, _AXES))
    unnest = sql.SQL(
        " FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[],"
        " %b::text[], %b::text[], %b::bytea[], %b::bigint[], %b::float8[], %b::bigint[])"
        " WITH ORDINALITY AS u(i, e, g, n, a, r, k, f, v, w, b, o)"
    )
    vec = sql.SQL("(%b::float4[])[(u.o - 1) * {dim} + 1 : u.o * {dim}]::{vector}").format(
        dim=sql.Literal(embedding_dim), vector=vector
    )
    insert = sql.SQL(
        "INSERT INTO {t} (chunk_id, {axes}, revision, record_json, embedding_key,"
        " embedding_f64, embedding, updated_at, record_bytes)"
        " SELECT u.i, u.e, u.g, u.n, u.a, u.v, u.r, u.k, u.f, {vec}, u.w, u.b{unnest}"
        " ORDER BY u.o ON CONFLICT (chunk_id) DO NOTHING RETURNING chunk_id"
    ).format(t=t, axes=axes, vec=vec, unnest=unnest)
    update = sql.SQL(
        "UPDATE {t} AS c SET {sets}, revision = u.v, record_json = u.r, embedding_key = u.k,"
        " embedding_f64 = u.f, embedding = {vec}, updated_at = u.w, record_bytes = u.b{unnest}"
        " WHERE c.chunk_id = u.i"
    ).format(
        t=t,
        sets=sql.SQL(", ").join(
            sql.SQL("{a} = u.{b}").format(a=sql.Identifier(a), b=sql.Identifier(b))
            for a, b in zip(_AXES, ("e", "g", "n", "a"), strict=True)
        ),
        vec=vec,
        unnest=unnest,
    )
    held_sql = sql.SQL(
        "SELECT " + _COLUMNS + ", updated_at FROM {t} WHERE chunk_id = ANY(%b)"
        " ORDER BY chunk_id FOR UPDATE"
    ).format(t=t)
    numbers: dict[int, int] = {}

    def arrays(indexes: list[int]) -> tuple[Any, ...]:
        scopes = [scope_columns(items[i].scope) for i in indexes]
        return (
            VectorRows(units[indexes]),
            [to_db(items[i].id) for i in indexes],
            *([s[a] for s in scopes] for a in range(len(_AXES))),
            [forms[i].record_json for i in indexes],
            [forms[i].embedding_key for i in indexes],
            [forms[i].embedding_f64 for i in indexes],
            [numbers[i] for i in indexes],
            [batch.written_at[i] for i in indexes],
            # What the record counts for in its tenant's usage (bifrost.quota).
            [len(canonical_json(items[i].record)) for i in indexes],
        )

    def perform(cur: Cursor[Any]) -> ImportOutcome:
        rows = cur.execute(held_sql, (sorted(map(to_db, ids)),), binary=True).fetchall()
        at = cutoff()
        index = {cid: i for i, cid in enumerate(ids)}
        held: dict[str, Held] = {}
        for cid, rj, k, blob, rev, written_at in rows:
            i = index[from_db(str(cid))]
            record = StoredChunk(str(rj), None if k is None else str(k), blob, int(rev)).record()
            held[ids[i]] = Held(
                same=int(rev) >= batch.revisions[i] and same_record(record, items[i].record),
                revision=int(rev),
                rescoped=record.get("scope") != dict(items[i].scope),
                expired=is_expired(float(written_at), at),
            )
        plan = plan_import(
            ids,
            batch.revisions,
            held,
            on_conflict,
            expired=expired_entries(batch, at),
            allow_scope_change=allow_scope_change,
        )
        new, over = plan.new, plan.over
        numbers.update(plan.revisions)
        if new:
            # In stored-id order: the order rows are locked in, as upserts lock them.
            new_sorted = sorted(new, key=lambda i: to_db(ids[i]))
            params = arrays(new_sorted)
            cur.execute(insert, (params[0], *params[1:]))
            if len(cur.fetchall()) != len(new):
                # Another writer created one of these ids since the read: a conflict.
                raise ImportConflict(min(i for i in new))
        if over:
            params = arrays(sorted(over, key=lambda i: to_db(ids[i])))
            cur.execute(update, params)
        return plan.outcome

    return db.run(perform, mode="write")
