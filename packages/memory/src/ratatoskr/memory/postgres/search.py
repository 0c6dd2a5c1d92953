"""The memory store's search on PostgreSQL: one statement, so one snapshot.

Its inner query takes the in-scope rows (btree per scope axis), orders them by
pgvector's float32 negative inner product of unit vectors and keeps the best
``top_k + 16``; the outer query joins back the stored form of those within the
re-rank margin of the k-th. Those candidates are re-ranked in float64 from the
stored embeddings; when all ``top_k + 16`` fell within the margin (a cluster of
near-duplicates), the statement runs again with four times the limit. No
approximate index exists, so the result is always the exact top_k of the
in-scope set.

A union of a few conjunctions (``scope_any``) takes each member's best rows on its
own and keeps the best of their ``UNION``: every row among the union's best
``limit`` is among the best ``limit`` of each member it belongs to, so the result
is the same, and each member can use its own index — a member that is one tenant
the covering index — where an ``OR`` makes one bitmap over the heap. (A row in
two members is the same ``(chunk_id, nd)`` twice: ``UNION`` keeps one.) Larger
unions keep the ``OR``: one scan rather than hundreds of plans.

A ``metadata_filter`` joins the predicate of :mod:`ratatoskr.memory.postgres.filters`
to the scope in one ``WHERE`` (its statement is rendered per call: the filter's
values are literals in it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from psycopg import sql

from bifrost.memory.filters import MetadataFilter
from bifrost.memory.validation import SearchQuery
from ratatoskr.memory.postgres.filters import DOC_LATERAL, filter_sql, filtered_prepare
from ratatoskr.memory.postgres.retention import LIVE_SQL
from ratatoskr.memory.postgres.stored import STORED_COLUMNS, stored_chunk
from ratatoskr.memory.records import search_rows, unit_float64
from ratatoskr.postgres.database import PostgresDatabase
from ratatoskr.postgres.scope import (
    Bounds,
    Conjunction,
    StatementCache,
    conjunction_sql,
    conjunctions,
    filter_params,
    filter_shape,
    where_sql,
)
from ratatoskr.postgres.text import from_db
from ratatoskr.postgres.vector import Vector

__all__ = ["ChunkSearch", "rerank_margin"]

# pgvector sums in float32: a score of two unit vectors is within about
# dim * 2**-24 of the float64 one. Every row within twice that, with room to
# spare, of the k-th float32 score is re-ranked exactly — the SQLite store's margin.
_RERANK_MARGIN = 1e-4
# Rows past top_k the first statement fetches, so a few near-ties need no second one.
_EXTRA_CANDIDATES = 16
# Unions of up to this many conjunctions are searched member by member.
_SPLIT_UNION_MAX = 8


def rerank_margin(embedding_dim: int) -> float:
    """How far below the k-th float32 score a row is still re-ranked in float64."""
    return max(_RERANK_MARGIN, 3 * (embedding_dim + 2) * 2.0**-24)


def _split(conjs: Sequence[Conjunction]) -> bool:
    """Whether the union is answered member by member (see the module docstring)."""
    return 1 < len(conjs) <= _SPLIT_UNION_MAX


class ChunkSearch:
    """The search statements of one chunks table (see the module docstring)."""

    def __init__(
        self, table: sql.Composable, ext: str, embedding_dim: int, bounds: Bounds | None
    ) -> None:
        self._t = table
        self._vector = sql.SQL("{}.vector").format(sql.Identifier(ext))
        self._neg_dot = sql.SQL("OPERATOR({}.<#>)").format(sql.Identifier(ext))
        self._bounds = bounds
        self._margin = rerank_margin(embedding_dim)
        self._cache = StatementCache()

    def run(
        self, db: PostgresDatabase, query: SearchQuery, cutoff: Callable[[], float]
    ) -> list[dict[str, Any]]:
        """The exact top_k in-scope chunks by cosine, best first, ties by chunk_id;
        ``cutoff()`` is retention's parameter. Raises StorageError subclasses."""
        conjs = conjunctions(query.scope_all, query.scope_any)
        if not conjs:
            return []
        exact_query = unit_float64(query.vector)
        probe = Vector(exact_query.astype(np.float32))
        mf = query.metadata_filter
        statement = self.statement(conjs, mf)
        limit = query.top_k + _EXTRA_CANDIDATES
        prepare = filtered_prepare(mf)
        while True:
            params = (
                *self.top_params(conjs, probe, limit, cutoff(), mf),
                query.top_k - 1,
                self._margin,
            )
            fetched = db.read(
                lambda cur, params=params: cur.execute(  # type: ignore[misc]
                    statement, params, binary=True, prepare=prepare
                ).fetchall()
            )
            if len(fetched) < limit:
                break
            # Every row the limit kept is a near-tie of the k-th: look further.
            limit *= 4
        found = {from_db(str(row[0])): stored_chunk(row[1:]) for row in fetched}
        return search_rows(found, exact_query, query)

    def top_params(
        self,
        conjs: Sequence[Conjunction],
        probe: Vector,
        limit: int,
        cutoff: float,
        mf: MetadataFilter | None = None,
    ) -> list[Any]:
        """The parameters of the statement's ``top`` part, in :meth:`statement`'s order."""
        if mf is not None or not _split(conjs):
            return [probe, *filter_params(conjs), cutoff, limit]
        out: list[Any] = []
        for conj in conjs:
            out += [probe, *filter_params([conj]), cutoff, limit]
        return [*out, limit]

    def statement(self, conjs: Sequence[Conjunction], mf: MetadataFilter | None = None) -> bytes:
        """The search statement for the shape of ``conjs``, rendered once per shape
        (with a ``metadata_filter``: per call)."""
        shape = filter_shape(conjs, self._bounds)
        cached = self._cache.get(shape) if mf is None else None
        if cached is not None:
            return cached
        statement = sql.SQL(
            "WITH top AS ({top})"
            " SELECT c.chunk_id, "
            + STORED_COLUMNS
            + " FROM top JOIN {t} AS c ON c.chunk_id = top.chunk_id"
            " WHERE top.nd <= COALESCE("
            "(SELECT nd FROM top ORDER BY nd, chunk_id OFFSET %s LIMIT 1),"
            " 'Infinity'::float8) + %s"
        ).format(t=self._t, top=self._top(conjs, mf))
        if mf is not None:
            return statement.as_bytes(None)
        return self._cache.put(shape, statement)

    def _top(self, conjs: Sequence[Conjunction], mf: MetadataFilter | None) -> sql.Composable:
        """The ``top`` part: the best ``limit`` rows of the filter by float32 score."""
        if mf is None and _split(conjs):
            members = [
                sql.SQL("({})").format(self._ranked(conjunction_sql(conj, bounds=self._bounds)[0]))
                for conj in conjs
            ]
            return sql.SQL(
                "SELECT chunk_id, nd FROM ({members}) AS u ORDER BY nd, chunk_id LIMIT %s"
            ).format(members=sql.SQL(" UNION ").join(members))
        return self._ranked(where_sql(conjs, self._bounds)[0], mf)

    def _ranked(self, where: sql.Composable, mf: MetadataFilter | None = None) -> sql.Composed:
        """The best ``limit`` live rows of ``where`` (and ``mf``) by float32 score."""
        return sql.SQL(
            "SELECT chunk_id, embedding {neg_dot} %b::{vector} AS nd FROM {t}{doc}"
            " WHERE ({where}) AND {live}{mf} ORDER BY nd, chunk_id LIMIT %s"
        ).format(
            t=self._t,
            vector=self._vector,
            neg_dot=self._neg_dot,
            where=where,
            live=LIVE_SQL,
            doc=sql.SQL("") if mf is None else DOC_LATERAL,
            mf=sql.SQL("") if mf is None else sql.SQL(" AND {}").format(filter_sql(mf)),
        )
