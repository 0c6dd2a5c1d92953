"""The memory store on PostgreSQL + pgvector: exact scoped cosine recall in SQL.

Implements bifrost's ``MemoryDataStore`` (and ``ScopeLookup``) exactly. Every
rule of the plane comes from ``bifrost.memory`` — the code the reference store
and the SQLite store run; this module owns persistence and ranking only. It
keeps the SQLite store's stored form and float64 re-rank
(``ratatoskr.memory.records``), so both backends return bit-equal scores.

Nothing is cached in the process: any number of provider processes on any
number of hosts can serve one schema, and every call sees every committed write.

**Writes** (``upsert_many``): bifrost's write path in one transaction around one
statement of :mod:`ratatoskr.memory.postgres.upsert`. **Search**: one statement
(one snapshot) of :mod:`ratatoskr.memory.postgres.search`, re-ranked in float64.

Reads ask for binary results: the float64 blob then arrives as its bytes rather
than as hex text (measured: docs/decisions.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Unpack

from psycopg import Cursor, sql

from bifrost.errors import InvalidArguments
from bifrost.limits import positive_limit
from bifrost.memory.options import memory_limits, retention_and_fields
from bifrost.memory.protocol import MemoryOptions, MemoryReads, MemoryWrites
from bifrost.memory.retention import expiry_cutoff
from bifrost.memory.validation import (
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
from bifrost.writes import WriteRequest
from ratatoskr.memory.postgres import portability
from ratatoskr.memory.postgres import schema as memory_schema
from ratatoskr.memory.postgres.field_index import ensure_field_indexes
from ratatoskr.memory.postgres.filters import DOC_LATERAL, filter_sql, filtered_prepare
from ratatoskr.memory.postgres.retention import LIVE_SQL, cutoff_param
from ratatoskr.memory.postgres.retention import sweep as sweep_rows
from ratatoskr.memory.postgres.search import ChunkSearch
from ratatoskr.memory.postgres.stored import STORED_COLUMNS, stored_chunk
from ratatoskr.memory.postgres.upsert import ChunkUpserts, live_scopes_sql
from ratatoskr.memory.records import StoredChunk
from ratatoskr.memory.retention import Sweeper
from ratatoskr.postgres.database import Pool, PoolOptions, PostgresDatabase, on_table, open_schema
from ratatoskr.postgres.erase import delete_granted, forget_rows, locked_scopes_sql
from ratatoskr.postgres.extension import vector_extension, vector_type_oid
from ratatoskr.postgres.migrations import MetaSetting
from ratatoskr.postgres.scope import Bounds, conjunctions, scopes_by_key, where_sql
from ratatoskr.postgres.store import SchemaStore
from ratatoskr.postgres.text import from_db, to_db

__all__ = ["MemoryStoreOptions", "PostgresMemoryStore", "open_postgres_memory_store"]


class PostgresMemoryStore(MemoryWrites, MemoryReads, SchemaStore):
    """A memory store over one schema of a PostgreSQL server (see the module docstring)."""

    def __init__(
        self, db: PostgresDatabase, *, embedding_dim: int, **options: Unpack[MemoryStoreOptions]
    ) -> None:
        # Options and their defaults: bifrost.memory.protocol.MemoryOptions. Expiry
        # (ratatoskr.memory.postgres.retention): every read holds LIVE_SQL.
        self.take_options(embedding_dim, options)
        SchemaStore.__init__(self, db, memory_schema.TABLES, self._clock, self.quota)
        found = db.run(vector_extension)
        if found is None:
            raise RuntimeError("the vector extension vanished after the schema was created")
        t = db.table(memory_schema.CHUNKS)
        self._vector_oid = db.run(lambda cur: vector_type_oid(cur, found[0]))
        self._upserts = ChunkUpserts(t, found[0], embedding_dim, self._vector_oid)
        # Filters name the covering index's bound so the planner may use it (schema.py).
        self._bounds: Bounds | None = (
            {"tenant": memory_schema.COVERED_TENANT_BYTES}
            if embedding_dim <= memory_schema.COVERED_DIM_MAX
            else None
        )
        self._search = ChunkSearch(t, found[0], embedding_dim, self._bounds)
        self._compose_sql(t)
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

    def _compose_sql(self, t: sql.Composed) -> None:
        self._table = t
        self._fetch_sql = on_table(
            t,
            "SELECT chunk_id, " + STORED_COLUMNS + " FROM {t}"
            " WHERE chunk_id = ANY(%b) AND updated_at >= %s",
        )
        self._scopes_sql = live_scopes_sql(t)
        self._lock_sql = locked_scopes_sql(t, "chunk_id")
        # Expired rows go too, uncounted.
        self._delete_sql = on_table(
            t, "DELETE FROM {t} WHERE chunk_id = ANY(%b) RETURNING updated_at >= %s"
        )
        self._count_sql = on_table(t, "SELECT count(*) FROM {t}")

    # -- descriptors -----------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Static facts plus a round trip to the server; never counts of data.

        Raises StorageError subclasses when the server cannot be reached."""
        self._ping()
        return super().health()

    # -- writes ----------------------------------------------------------------------

    def perform_upsert(self, request: WriteRequest[ValidatedChunk], actor: str) -> dict[str, Any]:
        """``upsert_many`` after bifrost's validation (``MemoryWrites``): the chunks
        verbatim with their unit vectors, atomically and idempotently.

        Raises IdempotencyConflict, Forbidden, RevisionMismatch (nothing written on
        any), StorageError subclasses.
        """
        return self._write(request, actor, self._upserts.perform(request, self._cutoff))

    def perform_delete(self, ids: Sequence[str], grant: Mapping[str, str]) -> int:
        """Delete the chunks of the distinct ``ids`` inside ``grant`` (record and vector
        are one row) in one transaction: their rows locked, the grant decided on the
        scopes read (:func:`ratatoskr.postgres.erase.granted`), then deleted; how many
        of them were live."""

        def delete(cur: Cursor[Any], chosen: list[str]) -> int:
            cur.execute(self._delete_sql, (chosen, self._cutoff()))
            return sum(1 for (live,) in cur.fetchall() if live)

        return delete_granted(self._db, self._lock_sql, ids, grant, delete)

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
        return scopes_by_key(rows, from_db)

    def perform_search(self, query: SearchQuery) -> list[dict[str, Any]]:
        """The exact top_k in-scope chunks by cosine, best first, ties by chunk_id
        (see the module docstring). Raises StorageError subclasses."""
        return self._search.run(self._db, query, self._cutoff)

    def perform_scan(self, query: ScanQuery) -> list[tuple[str, dict[str, Any]]]:
        """A keyset page in one statement: the in-scope (and filtered) rows above
        ``after_id`` by ``chunk_id`` (``COLLATE "C"``: code-point order, which the
        stored escape of NUL keeps, see ``ratatoskr.postgres.text``)."""
        conjs = conjunctions(query.scope_all, query.scope_any)
        if not conjs:
            return []
        t = self._table
        where, params = where_sql(conjs, self._bounds)
        mf = query.metadata_filter
        statement = sql.SQL(
            "SELECT chunk_id, " + STORED_COLUMNS + " FROM {t}{doc}"
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
        for row in rows:
            chunk = stored_chunk(row[1:])
            record = chunk.record() if query.include_embedding else chunk.without_embedding()
            out.append((from_db(str(row[0])), scan_item(record, chunk.revision, True)))
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
            vector_oid=self._vector_oid,
            cutoff=self._cutoff,
            allow_scope_change=allow_scope_change,
        )

    def _fetch(self, ids: Sequence[str]) -> dict[str, StoredChunk]:
        keys = [to_db(i) for i in ids]
        cutoff = self._cutoff()
        rows = self._db.read(
            lambda cur: cur.execute(self._fetch_sql, (keys, cutoff), binary=True).fetchall()
        )
        return {from_db(str(row[0])): stored_chunk(row[1:]) for row in rows}


MemoryStoreOptions = MemoryOptions
"""The keyword arguments of :class:`PostgresMemoryStore` beside ``embedding_dim``
(bifrost's ``MemoryOptions``)."""


def open_postgres_memory_store(
    dsn: str | Pool,
    *,
    embedding_dim: int,
    schema: str = "ratatoskr_memory",
    pool_options: PoolOptions | None = None,
    **options: Unpack[MemoryStoreOptions],
) -> PostgresMemoryStore:
    """Open (creating the schema, its tables and the ``vector`` extension on first use)
    the memory store in ``schema`` on the server of ``dsn`` — a libpq URI or
    key=value string, or an open pool to share (then ``close()`` leaves it open).
    ``options`` go to :class:`PostgresMemoryStore`: ``quota`` is the per-tenant quota
    (``bifrost.quota``; a write past it raises QuotaExceeded, nothing written);
    ``retention_s`` expires chunks not written for that long (None: never;
    :mod:`ratatoskr.memory.postgres.retention`).

    Raises InvalidLimits (an InvalidArguments and a ValueError) for a bad
    ``embedding_dim`` or limit; InvalidArguments for a dimension past pgvector's;
    ValueError for a bad schema name; SchemaMismatch (naming both dimensions, nothing
    changed) when the schema was created with another dimension;
    StorageUnavailable, ForeignDatabase, SchemaTooNew.
    """
    positive_limit("embedding_dim", embedding_dim)
    if embedding_dim > 16_000:
        raise InvalidArguments("embedding_dim must be at most 16000 (pgvector's limit)")
    # Every check the store makes of its options, before the schema is made.
    memory_limits(embedding_dim, options)
    retention_and_fields(options.get("retention_s"), options.get("filterable_fields", ()))
    return open_schema(
        dsn,
        lambda db: PostgresMemoryStore(db, embedding_dim=embedding_dim, **options),
        schema=schema,
        plane=memory_schema.PLANE,
        migrations=memory_schema.migrations(schema, embedding_dim),
        meta={"embedding_dim": MetaSetting(str(embedding_dim), "embedding_dim")},
        pool_options=pool_options,
    )
