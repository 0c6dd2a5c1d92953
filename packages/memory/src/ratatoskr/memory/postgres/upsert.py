"""The memory store's write path on PostgreSQL: ``upsert_many``'s own SQL.

bifrost's write path runs around it in one transaction
(``ratatoskr.postgres.writes.run_write``: the ledger claim, the revision check,
the quota, the ledger's entry); the store's own part is one statement — every
chunk of the batch as array parameters, upserted in id order with ``revision =
revision + 1 … RETURNING revision``, which locks each row and reports the
revision it replaced (a row another transaction created meanwhile included: of
eight writers creating one id with expected revision 0, exactly one succeeds).
Its text is the same for every batch size, so psycopg converts it and the server
plans it once. A row outside the caller's grant is locked but not changed (the
grant predicate); its scope is read back, still locked, for bifrost to refuse the
write. An expired row is absent: written anew at revision 1, by any grant.

Everything but the SQL (the stored forms, the unit vectors, the id order) is done
before the transaction: it holds row locks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg import Cursor, sql

from bifrost.memory.validation import ValidatedChunk
from bifrost.writes import WriteRequest
from ratatoskr.memory.postgres.retention import LIVE_SQL
from ratatoskr.memory.postgres.stored import blob_arrays
from ratatoskr.memory.records import stored_forms
from ratatoskr.postgres.arrays import BinaryArray, int8_array, text_array
from ratatoskr.postgres.scope import scope_arrays, scope_column_list, scope_sets, scopes_by_key
from ratatoskr.postgres.text import from_db, to_db
from ratatoskr.postgres.vector import VectorArray
from ratatoskr.postgres.writes import (
    Perform,
    Replaced,
    grant_params,
    grant_predicate,
    revisions_before,
)

__all__ = ["ChunkUpserts", "live_scopes_sql"]


def live_scopes_sql(table: sql.Composable) -> sql.Composed:
    """``chunk_id`` and the scope columns of the live rows whose id is in an array
    (parameters: the stored ids, the cutoff)."""
    return sql.SQL("SELECT chunk_id, {axes} FROM {t} WHERE chunk_id = ANY(%b) AND {live}").format(
        t=table, axes=scope_column_list(), live=LIVE_SQL
    )


class ChunkUpserts:
    """The upsert of one chunks table (see the module docstring)."""

    def __init__(
        self, table: sql.Composable, ext: str, embedding_dim: int, vector_oid: int
    ) -> None:
        self.embedding_dim = embedding_dim
        self._vector_oid = vector_oid
        # unnest keeps the arrays' order and ORDER BY makes it the write (and lock) order.
        self._upsert_sql = (
            sql.SQL(
                "INSERT INTO {t} AS c (chunk_id, {axes}, revision, record_json, embedding_key,"
                " embedding_f64, embedding_f32, record_bytes, embedding, updated_at)"
                " SELECT u.i, u.e, u.g, u.n, u.a, 1, u.r, u.k, u.f, u.h, u.b, u.v, %s"
                " FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[],"
                " %b::text[], %b::text[], %b::bytea[], %b::bytea[], %b::int8[], %b::{vector}[])"
                " WITH ORDINALITY AS u(i, e, g, n, a, r, k, f, h, b, v, o)"
                " ORDER BY u.o"
                " ON CONFLICT (chunk_id) DO UPDATE SET {sets},"
                " revision = CASE WHEN c.updated_at < %s THEN 1 ELSE c.revision + 1 END,"
                " record_json = EXCLUDED.record_json, embedding_key = EXCLUDED.embedding_key,"
                " embedding_f64 = EXCLUDED.embedding_f64, embedding_f32 = EXCLUDED.embedding_f32,"
                " record_bytes = EXCLUDED.record_bytes, embedding = EXCLUDED.embedding,"
                " updated_at = EXCLUDED.updated_at"
                " WHERE ({inside}) OR c.updated_at < %s RETURNING chunk_id, revision"
            )
            .format(
                t=table,
                axes=scope_column_list(),
                vector=sql.SQL("{}.vector").format(sql.Identifier(ext)),
                sets=scope_sets(),
                inside=grant_predicate("c"),
            )
            .as_bytes(None)
        )
        self._scopes_sql = live_scopes_sql(table)

    def perform(
        self, request: WriteRequest[ValidatedChunk], cutoff: Callable[[float], float]
    ) -> Perform:
        """The statements of ``request`` for ``run_write`` (``cutoff(now)``: retention's
        parameter at the transaction's time)."""
        ids, columns = self._columns(request)
        grant = grant_params(request.grant)

        def perform(cur: Cursor[Any], now: float) -> Replaced:
            at = cutoff(now)
            cur.execute(self._upsert_sql, (now, *columns, at, *grant, at))
            revisions = revisions_before(cur.fetchall(), from_db)
            refused = [i for i in ids if from_db(i) not in revisions]
            if not refused:
                return Replaced(revisions, {})
            # Rows outside the grant: locked by the statement, so their scopes stay.
            rows = cur.execute(self._scopes_sql, (refused, at), binary=True).fetchall()
            return Replaced(revisions, scopes_by_key(rows, from_db))

        return perform

    def _columns(
        self, request: WriteRequest[ValidatedChunk]
    ) -> tuple[list[str], tuple[BinaryArray | VectorArray, ...]]:
        """The batch as the upsert's array parameters, rows in stored-id order (the
        order the statement writes and locks them in, so overlapping batches cannot
        deadlock)."""
        order = sorted(range(len(request.items)), key=lambda i: to_db(request.ids[i]))
        chunks = [request.items[i] for i in order]
        sizes = request.record_sizes()  # each chunk's share of its tenant's quota
        forms, units = stored_forms(chunks, self.embedding_dim)
        ids = [to_db(c.id) for c in chunks]
        return (
            ids,
            (
                text_array(ids),
                *scope_arrays([c.scope for c in chunks]),
                text_array([f.record_json for f in forms]),
                *blob_arrays(forms),
                int8_array([sizes[i] for i in order]),
                VectorArray(units, self._vector_oid),
            ),
        )
