"""The memory store on PostgreSQL + pgvector: exact scoped cosine recall in SQL.

Implements bifrost's ``MemoryDataStore`` (and ``ScopeLookup``) exactly. Every
rule of the plane comes from ``bifrost.memory`` — the code the reference store
and the SQLite store run; this module owns persistence and ranking only. It
keeps the SQLite store's stored form and float64 re-rank
(``ratatoskr.memory.records``), so both backends return bit-equal scores.

Nothing is cached in the process: any number of provider processes on any
number of hosts can serve one schema, and every call sees every committed write.

**Writes** (``upsert_many``): bifrost's write path in one transaction
(``ratatoskr.postgres.writes.run_write``: the ledger claim, the revision check,
the ledger's entry); the store's own part is one statement — every chunk of
the batch as array parameters, upserted in id order with ``revision = revision
+ 1 … RETURNING revision``, which locks each row and reports the revision it
replaced (a row another transaction created meanwhile included: of eight
writers creating one id with expected revision 0, exactly one succeeds). Its
text is the same for every batch size, so psycopg converts it and the server
plans it once.

Reads ask for binary results: the float64 blob then arrives as its bytes rather
than as hex text (measured: docs/decisions.md).

**Search**: one statement, so one snapshot. Its inner query takes the in-scope
rows (btree per scope axis), orders them by pgvector's float32 negative inner
product of unit vectors and keeps the best ``top_k + 16``; the outer query
joins back the stored form of those within the re-rank margin of the k-th.
Those candidates are re-ranked in float64 from the stored embeddings; when all
``top_k + 16`` fell within the margin (a cluster of near-duplicates), the
statement runs again with four times the limit. No approximate index exists,
so the result is always the exact top_k of the in-scope set.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from psycopg import Cursor, sql

from bifrost.errors import InvalidArguments
from bifrost.fields import validate_fields
from bifrost.limits import check_memory_limits, positive_limit
from bifrost.memory.filters import MetadataFilter
from bifrost.memory.protocol import MemoryReads, MemoryWrites, memory_health
from bifrost.memory.retention import expiry_cutoff, validate_retention
from bifrost.memory.validation import (
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_PAGE,
    DEFAULT_MAX_TOP_K,
    ScanQuery,
    SearchQuery,
    ValidatedChunk,
    scan_item,
)
from bifrost.portability import (
    ExportedChunk,
    ImportedChunks,
    ImportOutcome,
    OnConflict,
)
from bifrost.quota import NO_QUOTA, Quota
from bifrost.scope import DEFAULT_MAX_SCOPE_ANY
from bifrost.writes import WriteRequest
from ratatoskr.memory.postgres import portability
from ratatoskr.memory.postgres import schema as memory_schema
from ratatoskr.memory.postgres.field_index import ensure_field_indexes
from ratatoskr.memory.postgres.filters import DOC_LATERAL, filter_sql, filtered_prepare
from ratatoskr.memory.postgres.retention import LIVE_SQL, cutoff_param
from ratatoskr.memory.postgres.retention import sweep as sweep_rows
from ratatoskr.memory.records import (
    StoredChunk,
    search_rows,
    stored_forms,
    unit_float64,
)
from ratatoskr.memory.retention import Sweeper
from ratatoskr.postgres.database import Pool, PoolOptions, PostgresDatabase, on_table, open_schema
from ratatoskr.postgres.erase import forget_rows, granted, locked_scopes_sql
from ratatoskr.postgres.extension import vector_extension
from ratatoskr.postgres.migrations import MetaSetting
from ratatoskr.postgres.scope import (
    AXIS_COLUMNS,
    Bounds,
    FilterShape,
    conjunction_sql,
    conjunctions,
    filter_params,
    filter_shape,
    scope_columns,
    scope_from_columns,
    where_sql,
)
from ratatoskr.postgres.store import SchemaStore
from ratatoskr.postgres.text import from_db, to_db
from ratatoskr.postgres.vector import Vector, VectorRows
from ratatoskr.postgres.writes import Replaced, grant_params, grant_predicate, revisions_before

__all__ = ["PostgresMemoryStore", "open_postgres_memory_store"]

# pgvector sums in float32: a score of two unit vectors is within about
# dim * 2**-24 of the float64 one. Every row within twice that, with room to
# spare, of the k-th float32 score is re-ranked exactly — the SQLite store's margin.
_RERANK_MARGIN = 1e-4
# Rows past top_k the first statement fetches, so a few near-ties need no second one.
_EXTRA_CANDIDATES = 16
_AXES = tuple(AXIS_COLUMNS.values())
# Rendered statements kept per store (per filter shape).
_STATEMENT_CACHE = 128
# Unions of up to this many conjunctions are searched member by member (_search_sql).
_SPLIT_UNION_MAX = 8


def rerank_margin(embedding_dim: int) -> float:
    """How far below the k-th float32 score a row is still re-ranked in float64."""
    return max(_RERANK_MARGIN, 3 * (embedding_dim + 2) * 2.0**-24)


class PostgresMemoryStore(MemoryWrites, MemoryReads, SchemaStore):
    """A memory store over one schema of a PostgreSQL server (see the module docstring)."""

    def __init__(
        self,
        db: PostgresDatabase,
        *,
        embedding_dim: int,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_top_k: int = DEFAULT_MAX_TOP_K,
        max_scope_any: int = DEFAULT_MAX_SCOPE_ANY,
        clock: Callable[[], float] = time.time,
        max_page: int = DEFAULT_MAX_PAGE,
        filterable_fields: Sequence[str] = (),
        quota: Quota = NO_QUOTA,
        retention_s: float | None = None,
    ) -> None:
        check_memory_limits(
            embedding_dim=embedding_dim,
            max_batch=max_batch,
            max_top_k=max_top_k,
            max_scope_any=max_scope_any,
            max_page=max_page,
        )
        # Expiry (ratatoskr.memory.postgres.retention): every read holds LIVE_SQL.
        self.retention_s = validate_retention(retention_s)
        self.max_page = max_page
        self.filterable_fields = validate_fields(filterable_fields)
        SchemaStore.__init__(
            self,
            db,
            memory_schema.ledger(db.schema),
            clock,
            quota=quota,
            usage=memory_schema.usage(db.schema),
        )
        self.embedding_dim = embedding_dim
        self.max_batch = max_batch
        self.max_top_k = max_top_k
        self.max_scope_any = max_scope_any
        self._margin = rerank_margin(embedding_dim)
        # Filters name the covering index's bound so the planner may use it (schema.py).
        self._bounds: Bounds | None = (
            {"tenant": memory_schema.COVERED_TENANT_BYTES}
            if embedding_dim <= memory_schema.COVERED_DIM_MAX
            else None
        )
        found = db.run(vector_extension)
        if found is None:
            raise RuntimeError("the vector extension vanished after the schema was created")
        self._compose_sql(found[0])
        ensure_field_indexes(db, memory_schema.CHUNKS, self.filterable_fields)
        self._sweeper = Sweeper(self.sweep_expired) if self.retention_s is not None else None

    def _cutoff(self, now: float | None = None) -> float:
        """The expiry cutoff parameter at ``now`` (default: the clock)."""
        return cutoff_param(expiry_cutoff(self._clock() if now is None else now, self.retention_s))

    def sweep_expired(self, limit: int | None = None) -> int:
        """Delete up to ``limit`` (None: all) expired chunks now, oldest first; how many
        (what the background sweep runs)."""
        return sweep_rows(
            self._db,
            memory_schema.CHUNKS,
            lambda: expiry_cutoff(self._clock(), self.retention_s),
            limit=limit,
        )

    def close(self) -> None:
        """Stop the retention sweep, then close as every schema store does."""
        if self._sweeper is not None:
            self._sweeper.stop()
        super().close()

    def _compose_sql(self, ext: str) -> None:
        t = self._db.table(memory_schema.CHUNKS)
        vector = sql.SQL("{}.vector").format(sql.Identifier(ext))
        neg_dot = sql.SQL("OPERATOR({}.<#>)").format(sql.Identifier(ext))
        axes = sql.SQL(", ").join(map(sql.Identifier, _AXES))
        dim = sql.Literal(self.embedding_dim)
        # One statement for every batch size (see ratatoskr.postgres.vector.VectorRows):
        # unnest keeps the arrays' order and ORDER BY makes it the write (and lock) order.
        self._upsert_sql = (
            sql.SQL(
                "INSERT INTO {t} AS c (chunk_id, {axes}, revision, record_json, embedding_key,"
                " embedding_f64, record_bytes, embedding, updated_at)"
                " SELECT u.i, u.e, u.g, u.n, u.a, 1, u.r, u.k, u.f, u.b,"
                " (%b::float4[])[(u.o - 1) * {dim} + 1 : u.o * {dim}]::{vector}, %s"
                " FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[],"
                " %b::text[], %b::text[], %b::bytea[], %b::int8[])"
                " WITH ORDINALITY AS u(i, e, g, n, a, r, k, f, b, o)"
                " ORDER BY u.o"
                " ON CONFLICT (chunk_id) DO UPDATE SET {sets},"
                # An expired row is absent: written anew at revision 1, by any grant.
                " revision = CASE WHEN c.updated_at < %s THEN 1 ELSE c.revision + 1 END,"
                " record_json = EXCLUDED.record_json, embedding_key = EXCLUDED.embedding_key,"
                " embedding_f64 = EXCLUDED.embedding_f64, record_bytes = EXCLUDED.record_bytes,"
                " embedding = EXCLUDED.embedding,"
                " updated_at = EXCLUDED.updated_at"
                " WHERE ({inside}) OR c.updated_at < %s RETURNING chunk_id, revision"
            )
            .format(
                t=t,
                axes=axes,
                dim=dim,
                vector=vector,
                sets=sql.SQL(", ").join(
                    sql.SQL("{a} = EXCLUDED.{a}").format(a=sql.Identifier(a)) for a in _AXES
                ),
                inside=grant_predicate("c"),
            )
            .as_bytes(None)
        )
        self._search_by_shape: dict[FilterShape, bytes] = {}
        self._fetch_sql = on_table(
            t,
            "SELECT chunk_id, record_json, embedding_key, embedding_f64, revision FROM {t}"
            " WHERE chunk_id = ANY(%b) AND updated_at >= %s",
        )
        self._scopes_sql = sql.SQL(
            "SELECT chunk_id, {axes} FROM {t} WHERE chunk_id = ANY(%b) AND {live}"
        ).format(t=t, axes=axes, live=LIVE_SQL)
        self._lock_sql = locked_scopes_sql(t, "chunk_id")
        # Expired rows go too, uncounted.
        self._delete_sql = on_table(
            t, "DELETE FROM {t} WHERE chunk_id = ANY(%b) RETURNING updated_at >= %s"
        )
        self._count_sql = on_table(t, "SELECT count(*) FROM {t}")
        # Filled in per filter shape by _search_sql.
        self._search_head = (t, vector, neg_dot)

    # -- descriptors -----------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Static facts plus a round trip to the server; never counts of data.

        Raises StorageError subclasses when the server cannot be reached."""
        self._ping()
        return memory_health(
            embedding_dim=self.embedding_dim,
            max_batch=self.max_batch,
            max_top_k=self.max_top_k,
            max_page=self.max_page,
        )

    # -- writes ----------------------------------------------------------------------

    def perform_upsert(self, request: WriteRequest[ValidatedChunk], actor: str) -> dict[str, Any]:
        """``upsert_many`` after bifrost's validation (``MemoryWrites``): the chunks
        verbatim with their unit vectors, atomically and idempotently.

        Raises IdempotencyConflict, Forbidden, RevisionMismatch (nothing written on
        any), StorageError subclasses.
        """
        # Everything but the SQL happens before the transaction: it holds row locks.
        vectors, columns = self._columns(request)
        grant = grant_params(request.grant)

        def perform(cur: Cursor[Any], now: float) -> Replaced:
            cutoff = self._cutoff(now)
            cur.execute(self._upsert_sql, (vectors, now, *columns, cutoff, *grant, cutoff))
            revisions = revisions_before(cur.fetchall(), from_db)
            refused = [i for i in columns[0] if from_db(i) not in revisions]
            if not refused:
                return Replaced(revisions, {})
            # Rows outside the grant: locked by the statement, so their scopes stay.
            rows = cur.execute(self._scopes_sql, (refused, cutoff), binary=True).fetchall()
            return Replaced(
                revisions, {from_db(str(r[0])): scope_from_columns(r[1:]) for r in rows}
            )

        return self._write(request, actor, perform)

    def _columns(
        self, request: WriteRequest[ValidatedChunk]
    ) -> tuple[VectorRows, tuple[list[Any], ...]]:
        """The batch as the upsert's array parameters, rows in stored-id order (the
        order the statement writes and locks them in, so overlapping batches cannot
        deadlock)."""
        order = sorted(range(len(request.items)), key=lambda i: to_db(request.ids[i]))
        chunks = [request.items[i] for i in order]
        sizes = request.record_sizes()  # each chunk's share of its tenant's quota
        forms, units = stored_forms(chunks, self.embedding_dim)
        scopes = [scope_columns(c.scope) for c in chunks]
        return VectorRows(units), (
            [to_db(c.id) for c in chunks],
            *([s[a] for s in scopes] for a in range(len(_AXES))),
            [f.record_json for f in forms],
            [f.embedding_key for f in forms],
            [f.embedding_f64 for f in forms],
            [sizes[i] for i in order],
        )

    def perform_delete(self, ids: Sequence[str], grant: Mapping[str, str]) -> int:
        """Delete the chunks of the distinct ``ids`` inside ``grant`` (record and vector
        are one row) in one transaction: their rows locked, the grant decided on the
        scopes read (:func:`ratatoskr.postgres.erase.granted`), then deleted; how many
        of them were live."""
        wanted = sorted(map(to_db, ids))
        if not wanted:
            return 0

        def delete(cur: Cursor[Any]) -> int:
            chosen = granted(cur, self._lock_sql, wanted, grant)
            if not chosen:
                return 0
            cur.execute(self._delete_sql, (chosen, self._cutoff()))
            return sum(1 for (live,) in cur.fetchall() if live)

        return self._db.run(delete, mode="write")

    def forget(self, scope: Mapping[str, str], *, dry_run: bool = False) -> int:
        """Erase every chunk whose scope contains ``scope``'s axes, in bounded
        transactions (:func:`ratatoskr.postgres.erase.forget_rows`); the count."""
        return forget_rows(self._db, memory_schema.CHUNKS, "chunk_id", scope, dry_run=dry_run)

    # -- reads (validated by bifrost's MemoryReads) ----------------------------------

    def perform_get(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """The records of the distinct ``ids`` that exist, plus ``revision``, in order."""
        found = self._fetch(ids) if ids else {}
        return [{**found[i].record(), "revision": found[i].revision} for i in ids if i in found]

    def perform_scopes_of(self, ids: Sequence[str]) -> dict[str, dict[str, str]]:
        """``{id: scope}`` of the distinct ``ids`` that exist, read from the scope
        columns without touching any record."""
        if not ids:
            return {}
        keys = [to_db(i) for i in ids]
        cutoff = self._cutoff()
        rows = self._db.run(
            lambda cur: cur.execute(self._scopes_sql, (keys, cutoff), binary=True).fetchall()
        )
        return {from_db(str(r[0])): scope_from_columns(r[1:]) for r in rows}

    def perform_search(self, query: SearchQuery) -> list[dict[str, Any]]:
        """The exact top_k in-scope chunks by cosine, best first, ties by chunk_id
        (see the module docstring). Raises StorageError subclasses."""
        conjs = conjunctions(query.scope_all, query.scope_any)
        if not conjs:
            return []
        exact_query = unit_float64(query.vector)
        probe = Vector(exact_query.astype(np.float32))
        mf = query.metadata_filter
        statement = self._search_sql(conjs, mf)
        limit = query.top_k + _EXTRA_CANDIDATES
        prepare = filtered_prepare(mf)
        while True:
            params = (*self._top_params(conjs, probe, limit, mf), query.top_k - 1, self._margin)
            fetched = self._db.read(
                lambda cur, params=params: cur.execute(  # type: ignore[misc]
                    statement, params, binary=True, prepare=prepare
                ).fetchall()
            )
            if len(fetched) < limit:
                break
            # Every row the limit kept is a near-tie of the k-th: look further.
            limit *= 4
        found = {
            from_db(str(cid)): StoredChunk(
                str(rj), None if key is None else str(key), blob, int(rev)
            )
            for cid, rj, key, blob, rev in fetched
        }
        return search_rows(found, exact_query, query)

    @staticmethod
    def _split(conjs: Sequence[dict[str, str]]) -> bool:
        """Whether the union is answered member by member (see :meth:`_search_sql`)."""
        return 1 < len(conjs) <= _SPLIT_UNION_MAX

    def _top_params(
        self,
        conjs: Sequence[dict[str, str]],
        probe: Vector,
        limit: int,
        mf: MetadataFilter | None = None,
    ) -> list[Any]:
        """The parameters of the statement's ``top`` part, in :meth:`_search_sql`'s order."""
        cutoff = self._cutoff()
        if mf is not None or not self._split(conjs):
            return [probe, *filter_params(conjs), cutoff, limit]
        out: list[Any] = []
        for conj in conjs:
            out += [probe, *filter_params([conj]), cutoff, limit]
        return [*out, limit]

    def _search_sql(
        self, conjs: Sequence[dict[str, str]], mf: MetadataFilter | None = None
    ) -> bytes:
        """The search statement for the shape of ``conjs``, rendered once per shape (bytes
        skip psycopg's composition on every call, and its parse cache keys on them).

        A union of a few conjunctions (``scope_any``) takes each member's best rows on
        its own and keeps the best of their ``UNION``: every row among the union's
        best ``limit`` is among the best ``limit`` of each member it belongs to, so the
        result is the same, and each member can use its own index — a member that is
        one tenant the covering index — where an ``OR`` makes one bitmap over the heap.
        (A row in two members is the same ``(chunk_id, nd)`` twice: ``UNION`` keeps
        one.) Larger unions keep the ``OR``: one scan rather than hundreds of plans.

        A ``metadata_filter`` joins the predicate of
        :mod:`ratatoskr.memory.postgres.filters` to the scope in one ``WHERE`` (its
        statement is rendered per call: the filter's values are literals in it)."""
        shape = filter_shape(conjs, self._bounds)
        cached = self._search_by_shape.get(shape) if mf is None else None
        if cached is not None:
            return cached
        t, vector, neg_dot = self._search_head
        if mf is not None:
            where, _params = where_sql(conjs, self._bounds)
            top = sql.SQL(
                "SELECT chunk_id, embedding {neg_dot} %b::{vector} AS nd FROM {t}{doc}"
                " WHERE ({where}) AND {live} AND {mf} ORDER BY nd, chunk_id LIMIT %s"
            ).format(
                t=t,
                vector=vector,
                neg_dot=neg_dot,
                where=where,
                doc=DOC_LATERAL,
                mf=filter_sql(mf),
                live=LIVE_SQL,
            )
        elif self._split(conjs):
            members = [
                sql.SQL(
                    "(SELECT chunk_id, embedding {neg_dot} %b::{vector} AS nd FROM {t}"
                    " WHERE {where} AND {live} ORDER BY nd, chunk_id LIMIT %s)"
                ).format(
                    t=t,
                    vector=vector,
                    neg_dot=neg_dot,
                    where=conjunction_sql(conj, bounds=self._bounds)[0],
                    live=LIVE_SQL,
                )
                for conj in conjs
            ]
            top = sql.SQL(
                "SELECT chunk_id, nd FROM ({members}) AS u ORDER BY nd, chunk_id LIMIT %s"
            ).format(members=sql.SQL(" UNION ").join(members))
        else:
            where, _params = where_sql(conjs, self._bounds)
            top = sql.SQL(
                "SELECT chunk_id, embedding {neg_dot} %b::{vector} AS nd FROM {t}"
                " WHERE ({where}) AND {live} ORDER BY nd, chunk_id LIMIT %s"
            ).format(t=t, vector=vector, neg_dot=neg_dot, where=where, live=LIVE_SQL)
        statement = sql.SQL(
            "WITH top AS ({top})"
            " SELECT c.chunk_id, c.record_json, c.embedding_key, c.embedding_f64, c.revision"
            " FROM top JOIN {t} AS c ON c.chunk_id = top.chunk_id"
            " WHERE top.nd <= COALESCE("
            "(SELECT nd FROM top ORDER BY nd, chunk_id OFFSET %s LIMIT 1),"
            " 'Infinity'::float8) + %s"
        ).format(t=t, top=top)
        if mf is not None:
            return statement.as_bytes(None)
        if len(self._search_by_shape) >= _STATEMENT_CACHE:
            self._search_by_shape.clear()  # bounded: a caller can make shapes without end
        rendered = self._search_by_shape[shape] = statement.as_bytes(None)
        return rendered

    def perform_scan(self, query: ScanQuery) -> list[tuple[str, dict[str, Any]]]:
        """A keyset page in one statement: the in-scope (and filtered) rows above
        ``after_id`` by ``chunk_id`` (``COLLATE "C"``: code-point order, which the
        stored escape of NUL keeps, see ``ratatoskr.postgres.text``)."""
        conjs = conjunctions(query.scope_all, query.scope_any)
        if not conjs:
            return []
        t = self._search_head[0]
        where, params = where_sql(conjs, self._bounds)
        mf = query.metadata_filter
        statement = sql.SQL(
            "SELECT chunk_id, record_json, embedding_key, embedding_f64, revision FROM {t}{doc}"
            " WHERE ({where}) AND {live} AND chunk_id > %s AND {mf} ORDER BY chunk_id LIMIT %s"
        ).format(
            t=t,
            live=LIVE_SQL,
            doc=DOC_LATERAL if mf is not None else sql.SQL(""),
            where=where,
            mf=filter_sql(mf) if mf is not None else sql.SQL("TRUE"),
        )
        after = "" if query.after_id is None else to_db(query.after_id)
        cutoff = self._cutoff()
        rows = self._db.read(
            lambda cur: cur.execute(
                statement,
                (*params, cutoff, after, query.limit + 1),
                binary=True,
                prepare=filtered_prepare(mf),
            ).fetchall()
        )
        out: list[tuple[str, dict[str, Any]]] = []
        for cid, rj, key, blob, rev in rows:
            chunk = StoredChunk(str(rj), None if key is None else str(key), blob, int(rev))
            record = chunk.record() if query.include_embedding else chunk.without_embedding()
            out.append((from_db(str(cid)), scan_item(record, chunk.revision, True)))
        return out

    # -- plumbing --------------------------------------------------------------------

    def count(self) -> int:
        """Number of stored chunks (for operators and tests; not a wire verb)."""
        row = self._db.run(lambda cur: cur.execute(self._count_sql).fetchone())
        return 0 if row is None else int(row[0])

    def export_page(
        self, after_id: str | None, limit: int, scope_all: Mapping[str, str]
    ) -> tuple[list[ExportedChunk], str | None]:
        """A keyset page for ``ratatoskr export`` (:mod:`ratatoskr.memory.postgres.portability`)."""
        return portability.export_page(self._db, after_id, limit, scope_all, self._cutoff())

    def import_chunks(
        self, batch: ImportedChunks, on_conflict: OnConflict, *, allow_scope_change: bool = False
    ) -> ImportOutcome:
        """One ``ratatoskr import`` batch (:mod:`ratatoskr.memory.postgres.portability`)."""
        return portability.import_chunks(
            self._db,
            batch,
            on_conflict,
            embedding_dim=self.embedding_dim,
            cutoff=self._cutoff,
            allow_scope_change=allow_scope_change,
        )

    def _fetch(self, ids: Sequence[str]) -> dict[str, StoredChunk]:
        keys = [to_db(i) for i in ids]
        cutoff = self._cutoff()
        rows = self._db.read(
            lambda cur: cur.execute(self._fetch_sql, (keys, cutoff), binary=True).fetchall()
        )
        return {
            from_db(str(cid)): StoredChunk(
                str(rj), None if key is None else str(key), blob, int(rev)
            )
            for cid, rj, key, blob, rev in rows
        }


def open_postgres_memory_store(
    dsn: str | Pool,
    *,
    embedding_dim: int,
    schema: str = "ratatoskr_memory",
    max_batch: int = DEFAULT_MAX_BATCH,
    max_top_k: int = DEFAULT_MAX_TOP_K,
    max_scope_any: int = DEFAULT_MAX_SCOPE_ANY,
    clock: Callable[[], float] = time.time,
    pool_options: PoolOptions | None = None,
    max_page: int = DEFAULT_MAX_PAGE,
    filterable_fields: Sequence[str] = (),
    quota: Quota = NO_QUOTA,
    retention_s: float | None = None,
) -> PostgresMemoryStore:
    """Open (creating the schema, its tables and the ``vector`` extension on first use)
    the memory store in ``schema`` on the server of ``dsn`` — a libpq URI or
    key=value string, or an open pool to share (then ``close()`` leaves it open).
    ``quota`` is the per-tenant quota (``bifrost.quota``; a write past it raises
    QuotaExceeded, nothing written); ``retention_s`` expires chunks not written for that
    long (None: never; :mod:`ratatoskr.memory.postgres.retention`).

    Raises InvalidLimits (an InvalidArguments and a ValueError) for a bad
    ``embedding_dim`` or limit; InvalidArguments for a dimension past pgvector's;
    ValueError for a bad schema name; SchemaMismatch (naming both dimensions, nothing
    changed) when the schema was created with another dimension;
    StorageUnavailable, ForeignDatabase, SchemaTooNew.
    """
    positive_limit("embedding_dim", embedding_dim)
    if embedding_dim > 16_000:
        raise InvalidArguments("embedding_dim must be at most 16000 (pgvector's limit)")
    return open_schema(
        dsn,
        lambda db: PostgresMemoryStore(
            db,
            embedding_dim=embedding_dim,
            max_batch=max_batch,
            max_top_k=max_top_k,
            max_scope_any=max_scope_any,
            clock=clock,
            max_page=max_page,
            filterable_fields=filterable_fields,
            quota=quota,
            retention_s=retention_s,
        ),
        schema=schema,
        plane=memory_schema.PLANE,
        migrations=memory_schema.migrations(schema, embedding_dim),
        meta={"embedding_dim": MetaSetting(str(embedding_dim), "embedding_dim")},
        pool_options=pool_options,
    )
