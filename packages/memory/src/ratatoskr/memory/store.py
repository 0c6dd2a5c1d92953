"""The durable memory store: SQLite + sqlite-vec, exact scoped cosine recall.

Implements bifrost's ``MemoryDataStore`` exactly. Every rule of the plane
(record shapes, limits, idempotency ids and digests, search validation, result
rows) comes from ``bifrost.memory``, the same code the reference store runs;
this module owns only persistence and ranking.

Writes run in one ``BEGIN IMMEDIATE`` transaction each (concurrent ones of this
process may share one and its COMMIT, each in a savepoint of its own:
:mod:`ratatoskr.sqlite.group`), along bifrost's write path (:mod:`bifrost.writes`;
the clock is read inside the transaction): chunk rows, vec0 rows, tombstones, the
change counter and the idempotency entry commit together or not at all, and each
write prunes a bounded number of expired ledger entries and of
tombstones past the retention horizon (:mod:`ratatoskr.memory.changes`).

Searches rank on the in-process vector index (:mod:`ratatoskr.memory.sync`),
brought up to the database's change counter inside the same read snapshot that
then fetches the winning records, and near-ties are re-ranked in float64 from the
stored embeddings (the float64 blob, see :mod:`ratatoskr.memory.records`) so
ranking and scores match the reference store. A search that leaves the embedding
out of its result never parses or builds it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import apsw
import numpy as np
import numpy.typing as npt

from bifrost.memory.protocol import MemoryReads, MemoryWrites
from bifrost.memory.validation import (
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_PAGE,
    DEFAULT_MAX_TOP_K,
    ScanQuery,
    SearchQuery,
    ValidatedChunk,
)
from bifrost.portability import (
    ExportedChunk,
    ImportedChunks,
    ImportOutcome,
    OnConflict,
)
from bifrost.quota import NO_QUOTA, Quota
from bifrost.scope import DEFAULT_MAX_SCOPE_ANY
from bifrost.writes import WriteRequest, batch_tenants, begin_write, check_quota
from ratatoskr.memory import changes, erase, portability, retention, rows
from ratatoskr.memory import records as stored_records
from ratatoskr.memory.changes import DEFAULT_TOMBSTONE_RETENTION
from ratatoskr.memory.limits import MemoryLimits
from ratatoskr.memory.records import StoredChunk
from ratatoskr.memory.scan import scan_rows
from ratatoskr.memory.schema import LEDGER, PLANE, QUOTA, migrations, rebuild_vec_table
from ratatoskr.memory.sync import SyncedIndex
from ratatoskr.sqlite import (
    ConnectionOptions,
    Database,
    MetaSetting,
    StorageError,
    StorageUnavailable,
    Written,
    codec,
)
from ratatoskr.sqlite.database import CompactReport, compact_database

# A search retries when a write of this process outran its read snapshot.
_SNAPSHOT_ATTEMPTS = 50


class SqliteMemoryStore(MemoryWrites, MemoryReads):
    """A memory store over one SQLite database file (or ``":memory:"``)."""

    def __init__(
        self, db: Database, limits: MemoryLimits, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._db = db
        self.limits = limits
        self.embedding_dim = limits.embedding_dim
        self.max_batch = limits.max_batch
        self.max_top_k = limits.max_top_k
        self.max_scope_any = limits.max_scope_any
        self.max_page = limits.max_page
        self.filterable_fields = limits.filterable_fields
        # Change-counter values whose tombstones are kept (see changes.py).
        self.tombstone_retention = limits.tombstone_retention
        self._clock = clock
        self._sync = SyncedIndex(limits.embedding_dim, limits.filterable_fields)
        with self._db.read() as conn:
            self._sync.load(conn)
        erase.attach(self)
        self.retention = retention.Retention(limits.retention_s, clock)
        # The background sweep of expired chunks (ratatoskr.memory.retention).
        self._sweeper = retention.Sweeper(self.sweep_expired) if self.retention.enabled else None

    # -- descriptors -----------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Static facts plus a round trip to the database; never counts of data."""
        with self._db.read() as conn:
            conn.execute("SELECT 1").fetchall()
        return super().health()

    # -- writes ------------------------------------------------------------------------

    def perform_upsert(self, request: WriteRequest[ValidatedChunk], actor: str) -> dict[str, Any]:
        """Persist chunks verbatim and index them, in one transaction (then mirror the
        committed write into the in-process index). Concurrent upserts of this process
        may share the transaction's COMMIT, each in a savepoint of its own
        (:meth:`ratatoskr.sqlite.Database.write_batch`)."""
        # Outside the transaction: the stored forms and unit vectors need nothing the
        # database holds.
        forms, units = stored_records.stored_forms(request.items, self.embedding_dim)

        def batch(conn: apsw.Connection) -> Written[dict[str, Any]]:
            write = begin_write(LEDGER.within(conn), request, actor, self._clock())
            if write.replayed is not None:
                return Written(write.replayed)
            current, scopes = rows.heads(conn, request.ids)
            expired = self.retention.drop_heads(conn, write.now, current, scopes)
            write.check(scopes, current)
            seq_before = changes.seq(conn)
            seq = seq_before + 1 if request else seq_before
            if not request:
                return Written(write.record())
            if expired:  # erased, then written anew at revision 1
                erase.remove_rows(conn, expired, seq)
            self._write_chunks(conn, request, forms, units, current, seq, write.now)
            if self.limits.quota.enabled:  # the usage the triggers left
                check_quota(QUOTA.read(conn, batch_tenants(request)), self.limits.quota)
            changes.set_seq(conn, seq)
            self._prune_tombstones(conn, seq, added=0)

            def committed() -> None:  # in commit order, only once committed
                self._sync.apply(
                    seq_before,
                    seq,
                    upserts=([c.id for c in request], units, [c.scope for c in request]),
                    records=[c.record for c in request],  # filter columns (filtered.py)
                )
                if expired:
                    self._db.erasure.erased()

            return Written(write.record(), committed)

        return self._db.write_batch(batch)

    def _write_chunks(
        self,
        conn: apsw.Connection,
        chunks: WriteRequest[ValidatedChunk],
        forms: Sequence[stored_records.StoredForm],
        units: npt.NDArray[np.float32],
        current: dict[str, int],
        seq: int,
        now: float,
    ) -> None:
        inserts: list[tuple[Any, ...]] = []
        updates: list[tuple[Any, ...]] = []
        vec_inserts: list[tuple[Any, ...]] = []
        vec_updates: list[tuple[Any, ...]] = []
        sizes = chunks.record_sizes()
        for chunk, form, unit, size in zip(chunks, forms, units, sizes, strict=True):
            stored = (
                form.record_json,
                form.embedding_key,
                form.embedding_f64,
                form.embedding_f32,
                size,
            )
            scope_json = rows.scope_json(tuple(sorted(chunk.scope.items())))
            origin = chunk.record.get("origin")
            origin_col = origin if isinstance(origin, str) else None
            # vec0 holds the unit vector: cosine ignores scale, and a raw float32 cast
            # would overflow (1e308) or flush to zero (subnormals).
            blob = unit.tobytes()
            if chunk.id in current:
                updates.append(
                    (*stored, current[chunk.id] + 1, scope_json, origin_col, seq, now, chunk.id)
                )
                vec_updates.append((blob, chunk.id))
            else:
                inserts.append((chunk.id, *stored, 1, scope_json, origin_col, seq, now))
                vec_inserts.append((chunk.id, blob))
        if inserts:
            conn.executemany(
                "INSERT INTO memory_chunks (chunk_id, record_json, embedding_key, embedding_f64,"
                " embedding_f32, record_bytes, revision, scope_json, origin, seq, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                inserts,
            )
            conn.executemany(
                "INSERT INTO memory_vec (chunk_id, embedding) VALUES (?, ?)", vec_inserts
            )
            changes.unbury(conn, [r[0] for r in inserts])
        if updates:
            conn.executemany(
                "UPDATE memory_chunks SET record_json = ?, embedding_key = ?, embedding_f64 = ?,"
                " embedding_f32 = ?, record_bytes = ?, revision = ?, scope_json = ?, origin = ?,"
                " seq = ?, updated_at = ?"
                " WHERE chunk_id = ?",
                updates,
            )
            conn.executemany("UPDATE memory_vec SET embedding = ? WHERE chunk_id = ?", vec_updates)

    def perform_delete(self, ids: Sequence[str], grant: Mapping[str, str]) -> int:
        """Delete the chunks inside ``grant`` and their index rows in one transaction,
        the grant decided in it (:func:`ratatoskr.memory.erase.delete`; then the
        committed delete mirrored into the in-process index); expired chunks go
        uncounted."""
        return erase.delete(self, ids, grant)

    def sweep_expired(self, limit: int | None = None) -> int:
        """Erase up to ``limit`` (None: all) expired chunks now, oldest first; how many
        (what the background sweep runs, see :mod:`ratatoskr.memory.retention`)."""
        return retention.sweep(self, limit=limit)

    def forget(self, scope: Mapping[str, str], *, dry_run: bool = False) -> int:
        """Erase every chunk whose scope contains ``scope``'s axes (see
        :func:`ratatoskr.memory.erase.forget`); returns the count."""
        return erase.forget(self, scope, dry_run=dry_run)

    def _prune_tombstones(self, conn: apsw.Connection, seq: int, *, added: int) -> None:
        """Drop tombstones past the retention horizon: more than this write ``added``,
        so the table stays within the window, and no more (bounded work per write)."""
        changes.prune(
            conn,
            at=seq,
            retention=self.tombstone_retention,
            limit=changes.PRUNE_PER_WRITE + added,
        )

    # -- reads -------------------------------------------------------------------------

    def perform_get(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """The records as written plus ``revision``, in one read snapshot."""
        with self._db.read() as conn:
            found = rows.fetch(conn, ids)
            self.retention.drop(conn, found)
        return [{**found[i].record(), "revision": found[i].revision} for i in ids if i in found]

    def perform_scopes_of(self, ids: Sequence[str]) -> dict[str, dict[str, str]]:
        """Read from the scope column alone: dispatch decides what a grant may see
        before any record is read, so ids of another tenant cost what absent ids cost."""
        selected: list[Any] = []
        with self._db.read() as conn:
            for part in rows.chunks(ids):
                selected += conn.execute(
                    "SELECT chunk_id, scope_json FROM memory_chunks"
                    f" WHERE chunk_id IN ({rows.placeholders(len(part))})",
                    tuple(part),
                ).fetchall()
            gone = (
                self.retention.expired(conn, [str(r[0]) for r in selected]) if selected else set()
            )
        if gone:
            selected = [r for r in selected if str(r[0]) not in gone]
        # Chunks share few distinct scopes: parse each once; every id gets its own copy.
        parsed: dict[str, dict[str, str]] = {}
        for text in {row[1] for row in selected}:
            parsed[text] = codec.loads(text)
        return {chunk_id: dict(parsed[text]) for chunk_id, text in selected}

    def perform_search(self, query: SearchQuery) -> list[dict[str, Any]]:
        """Rank on the in-process index inside one read snapshot, then re-rank the
        candidates in float64 from their stored embeddings."""
        exact_query = stored_records.unit_float64(query.vector)
        unit = exact_query.astype(np.float32)
        asked = query
        while True:
            found, gone = self._search_found(unit, asked)
            wider = retention.widened_top_k(query.top_k, asked.top_k, len(found) + gone, gone)
            if wider is None:
                return stored_records.search_rows(found, exact_query, query)
            asked = dataclasses.replace(query, top_k=wider)

    def _search_found(
        self, unit: npt.NDArray[np.float32], query: SearchQuery
    ) -> tuple[dict[str, StoredChunk], int]:
        """The candidates of ``query`` read in one snapshot, without the expired ones,
        and how many were expired."""
        for _attempt in range(_SNAPSHOT_ATTEMPTS):
            with self._db.read() as conn:
                # Optimistic: rank on the index as it is, then read the records and the
                # change counter in one statement (the snapshot's first): when the
                # counter is the index's, index and records agree.
                seq, candidates = self._sync.current(unit, query)
                found, db_seq = rows.fetch_at(conn, [c.chunk_id for c in candidates])
                if db_seq != seq:
                    # Another process wrote (the index catches up inside this snapshot),
                    # or a write of this process committed after this snapshot began.
                    again = self._sync.candidates(conn, db_seq, unit, query)
                    if again is None:
                        continue  # take a newer snapshot so index and records agree
                    found = rows.fetch(conn, [c.chunk_id for c in again])
                gone = len(self.retention.drop(conn, found))
            break
        else:
            raise StorageUnavailable("the index could not catch up with concurrent writes")
        return found, gone

    def perform_scan(self, query: ScanQuery) -> list[tuple[str, dict[str, Any]]]:
        """A keyset page in one read snapshot (:func:`ratatoskr.memory.scan.scan_rows`)."""
        return retention.scan_live(
            query,
            lambda q, drop: scan_rows(self._db, self._sync, q, rows.fetch_at, drop),
            self.retention,
        )

    # -- plumbing ----------------------------------------------------------------------

    def count(self) -> int:
        """Number of stored chunks (for operators and tests; not a wire verb)."""
        with self._db.read() as conn:
            return int(conn.execute("SELECT count(*) FROM memory_chunks").fetchall()[0][0])  # type: ignore[arg-type]

    def export_page(
        self, after_id: str | None, limit: int, scope_all: Mapping[str, str]
    ) -> tuple[list[ExportedChunk], str | None]:
        """A keyset page for ``ratatoskr export`` (:mod:`ratatoskr.memory.portability`)."""
        return portability.export_page(
            self._db, after_id, limit, scope_all, self.retention.cutoff()
        )

    def import_chunks(
        self, batch: ImportedChunks, on_conflict: OnConflict, *, allow_scope_change: bool = False
    ) -> ImportOutcome:
        """One ``ratatoskr import`` batch (:mod:`ratatoskr.memory.portability`)."""
        return portability.import_chunks(
            self._db,
            batch,
            on_conflict,
            embedding_dim=self.embedding_dim,
            tombstone_retention=self.tombstone_retention,
            cutoff=self.retention.cutoff,
            allow_scope_change=allow_scope_change,
        )

    def compact(self, *, full: bool = False, vectors: bool = True) -> CompactReport:
        """Give unused space back to the filesystem: rebuild the vec0 table when deleted
        vectors fill a chunk of it and ``vectors`` is true
        (:func:`~ratatoskr.memory.schema.rebuild_vec_table`), then
        :meth:`ratatoskr.sqlite.Database.compact` (incremental steps, or one ``VACUUM``
        for a file created before this release or with ``full``).

        Nothing a read returns changes and the in-memory index stays valid; searches go
        on. Writes wait for each step, and the vector rebuild is one transaction of
        ~0.1 ms per live chunk at 384 dims (42k: ~4-5 s): another process's writes
        fail after its busy timeout (10 s), so past ~80k live chunks rebuild while other
        processes do not write, or pass ``vectors=False`` (free pages only, short
        steps). Raises StorageError subclasses.
        """
        return self._db.compact(full=full, prepare=rebuild_vec_table if vectors else None)

    def close(self) -> None:
        """Leave the index's sidecar current when this store's writes moved it (so the
        next open maps it, see :meth:`SyncedIndex.save`), then close the database;
        idempotent. The sidecar is a cache: failing to write it never fails a close."""
        if self._sweeper is not None:
            self._sweeper.stop()
        with contextlib.suppress(StorageError), self._db.read() as conn:
            self._sync.save(conn)
        self._db.close()

    @property
    def database(self) -> Database:
        return self._db

    # ratatoskr.memory.erase reads the heads through the store.
    _heads = staticmethod(rows.heads)


# The name before the PostgreSQL stores arrived (kept: code and tests import it).
RatatoskrMemoryStore = SqliteMemoryStore


def open_memory_store(
    db_path: str,
    *,
    embedding_dim: int,
    max_batch: int = DEFAULT_MAX_BATCH,
    max_top_k: int = DEFAULT_MAX_TOP_K,
    max_scope_any: int = DEFAULT_MAX_SCOPE_ANY,
    tombstone_retention: int = DEFAULT_TOMBSTONE_RETENTION,
    clock: Callable[[], float] = time.time,
    options: ConnectionOptions | None = None,
    max_page: int = DEFAULT_MAX_PAGE,
    filterable_fields: Sequence[str] = (),
    quota: Quota = NO_QUOTA,
    retention_s: float | None = None,
) -> SqliteMemoryStore:
    """Open (creating schema and the vec index on first use) the memory store at ``db_path``.

    ``max_scope_any`` caps the members of a search's ``scope_any``;
    ``tombstone_retention`` is how many change-counter values of tombstones are kept
    for other processes' indexes to catch up from (see :mod:`ratatoskr.memory.changes`);
    ``max_page`` caps a ``scan`` page; ``filterable_fields`` are the fields a
    ``metadata_filter`` may name (indexed in memory at open, see
    :mod:`ratatoskr.memory.filtered`); ``quota`` is the per-tenant quota
    (:mod:`bifrost.quota`; a write past it raises QuotaExceeded, nothing written);
    ``retention_s`` expires chunks not written for that long (None: never; see
    :mod:`ratatoskr.memory.retention`, a serving store sweeps them in the background).

    Raises InvalidArguments for a bad ``embedding_dim`` or limit (before the file is
    opened); SchemaMismatch (naming both dimensions, file untouched) when the file was
    created with another dimension; StorageError subclasses for unusable files.
    """
    limits = MemoryLimits(
        embedding_dim,
        max_batch,
        max_top_k,
        max_scope_any,
        tombstone_retention,
        max_page,
        tuple(filterable_fields),
        quota,
        retention_s,
    )
    db = Database(
        db_path,
        plane=PLANE,
        migrations=migrations(embedding_dim),
        meta={"embedding_dim": MetaSetting(str(embedding_dim), "embedding_dim")},
        options=_connection_options(options),
    )
    try:
        return SqliteMemoryStore(db, limits, clock=clock)
    except BaseException:
        db.close()
        raise


def _connection_options(options: ConnectionOptions | None) -> ConnectionOptions:
    """The plane's connection options: sqlite-vec loaded, and no memory map unless the
    caller asks for one. Searches never scan SQLite (the index is in memory) and read a
    few rows each, so mapping buys nothing here, while every mapped page a reload or a
    long-lived process touches counts in its RSS (256 MB by default)."""
    return dataclasses.replace(
        options or ConnectionOptions(),
        mmap_size=options.mmap_size if options is not None else 0,
        load_vec=True,
    )


def compact_memory_file(db_path: str, *, full: bool = False, vectors: bool = True) -> CompactReport:
    """:meth:`SqliteMemoryStore.compact` for a memory file given by path, without
    opening a store (no index is loaded, no migration applied): for an operator's
    ``compact`` command, safe beside a provider serving the file (its writes wait for
    each step; see ``compact`` for the cost of the vector rebuild).

    Raises StorageUnavailable (no such file), ForeignDatabase (not a memory file) and
    the other StorageError subclasses.
    """
    return compact_database(
        db_path, plane=PLANE, full=full, prepare=rebuild_vec_table if vectors else None
    )
