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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from psycopg import Cursor, sql

from bifrost import portability
from bifrost.jsoncodec import canonical_json
from ratatoskr.memory.postgres import schema as memory_schema
from ratatoskr.memory.postgres.retention import LIVE_SQL, cutoff_param
from ratatoskr.memory.postgres.stored import STORED_COLUMNS, blob_arrays, stored_chunk
from ratatoskr.memory.records import StoredForm, stored_forms
from ratatoskr.postgres.database import PostgresDatabase
from ratatoskr.postgres.extension import vector_extension
from ratatoskr.postgres.scope import AXIS_COLUMNS, conjunction_sql, scope_arrays, scope_column_list
from ratatoskr.postgres.text import from_db, to_db
from ratatoskr.postgres.vector import VectorArray

__all__ = ["export_page", "import_chunks"]
_COLUMNS = "chunk_id, " + STORED_COLUMNS


def export_page(
    db: PostgresDatabase,
    after_id: str | None,
    limit: int,
    scope_all: Mapping[str, str],
    cutoff: float | None,
) -> tuple[list[portability.ExportedChunk], str | None]:
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
        portability.ExportedChunk(
            from_db(str(row[0])), chunk.record(), chunk.revision, float(row[-1])
        )
        for row in rows
        for chunk in (stored_chunk(row[1:-1]),)
    ]
    cursor = out[-1].chunk_id if len(rows) == limit else None
    return out, cursor


class _Statements:
    """The import's statements for one table (rendered once per batch)."""

    def __init__(self, db: PostgresDatabase) -> None:
        found = db.run(vector_extension)
        if found is None:
            raise RuntimeError("the vector extension vanished after the schema was created")
        t = db.table(memory_schema.CHUNKS)
        vector = sql.SQL("{}.vector").format(sql.Identifier(found[0]))
        unnest = sql.SQL(
            " FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[],"
            " %b::text[], %b::text[], %b::bytea[], %b::bytea[], %b::bigint[], %b::float8[],"
            " %b::bigint[], %b::{vector}[]) WITH ORDINALITY"
            " AS u(i, e, g, n, a, r, k, f, h, v, w, b, x, o)"
        ).format(vector=vector)
        vec = sql.SQL("u.x")
        self.insert = sql.SQL(
            "INSERT INTO {t} (chunk_id, {axes}, revision, record_json, embedding_key,"
            " embedding_f64, embedding_f32, embedding, updated_at, record_bytes)"
            " SELECT u.i, u.e, u.g, u.n, u.a, u.v, u.r, u.k, u.f, u.h, {vec}, u.w, u.b{unnest}"
            " ORDER BY u.o ON CONFLICT (chunk_id) DO NOTHING RETURNING chunk_id"
        ).format(t=t, axes=scope_column_list(), vec=vec, unnest=unnest)
        self.update = sql.SQL(
            "UPDATE {t} AS c SET {sets}, revision = u.v, record_json = u.r,"
            " embedding_key = u.k, embedding_f64 = u.f, embedding_f32 = u.h, embedding = {vec},"
            " updated_at = u.w, record_bytes = u.b{unnest} WHERE c.chunk_id = u.i"
        ).format(
            t=t,
            sets=sql.SQL(", ").join(
                sql.SQL("{a} = u.{b}").format(a=sql.Identifier(a), b=sql.Identifier(b))
                for a, b in zip(AXIS_COLUMNS.values(), ("e", "g", "n", "a"), strict=True)
            ),
            vec=vec,
            unnest=unnest,
        )
        self.held = sql.SQL(
            "SELECT " + _COLUMNS + ", updated_at FROM {t} WHERE chunk_id = ANY(%b)"
            " ORDER BY chunk_id FOR UPDATE"
        ).format(t=t)


class _ImportTx:
    """One import batch's SQL in its transaction (bifrost.portability.ChunkImportTx)."""

    def __init__(
        self,
        cur: Cursor[Any],
        statements: _Statements,
        forms: list[StoredForm],
        units: npt.NDArray[np.float32],
        vector_oid: int,
        cutoff: Callable[[], float | None],
    ) -> None:
        self._cur = cur
        self._sql = statements
        self._forms = forms
        self._units = units
        self._vector_oid = vector_oid
        self.cutoff = cutoff

    def held(self, ids: Sequence[str]) -> dict[str, portability.HeldChunk]:
        rows = self._cur.execute(self._sql.held, (sorted(map(to_db, ids)),), binary=True)
        return {
            from_db(str(row[0])): portability.HeldChunk(
                chunk.record(), chunk.revision, float(row[-1])
            )
            for row in rows.fetchall()
            for chunk in (stored_chunk(row[1:-1]),)
        }

    def write(self, batch: portability.ImportedChunks, plan: portability.ImportPlan) -> None:
        ids = batch.request.ids
        if plan.new:
            # In stored-id order: the order rows are locked in, as upserts lock them.
            new = sorted(plan.new, key=lambda i: to_db(ids[i]))
            params = self._arrays(batch, plan, new)
            self._cur.execute(self._sql.insert, params)
            if len(self._cur.fetchall()) != len(new):
                # Another writer created one of these ids since the read: a conflict.
                raise portability.ImportConflict(min(new))
        if plan.over:
            over = sorted(plan.over, key=lambda i: to_db(ids[i]))
            self._cur.execute(self._sql.update, self._arrays(batch, plan, over))

    def _arrays(
        self, batch: portability.ImportedChunks, plan: portability.ImportPlan, at: list[int]
    ) -> tuple[Any, ...]:
        items, forms = batch.request.items, self._forms
        return (
            [to_db(items[i].id) for i in at],
            *scope_arrays([items[i].scope for i in at]),
            [forms[i].record_json for i in at],
            *blob_arrays([forms[i] for i in at]),
            [plan.revisions[i] for i in at],
            [batch.written_at[i] for i in at],
            # What the record counts for in its tenant's usage (bifrost.quota).
            [len(canonical_json(items[i].record)) for i in at],
            VectorArray(self._units[at], self._vector_oid),
        )


def import_chunks(
    db: PostgresDatabase,
    batch: portability.ImportedChunks,
    on_conflict: portability.OnConflict,
    *,
    embedding_dim: int,
    vector_oid: int,
    cutoff: Callable[[], float | None],
    allow_scope_change: bool = False,
) -> portability.ImportOutcome:
    """``batch`` in one READ COMMITTED write transaction on the primary (a write slot,
    bounded by ``sync_wait``: PostgresDatabase.run). Raises ImportConflict,
    ImportScopeChange (nothing written), StorageError subclasses."""
    forms, units = stored_forms(batch.request.items, embedding_dim)
    statements = _Statements(db)
    return db.run(
        lambda cur: portability.import_chunk_batch(
            _ImportTx(cur, statements, forms, units, vector_oid, cutoff),
            batch,
            on_conflict,
            allow_scope_change=allow_scope_change,
        ),
        mode="write",
    )
