"""The durable memory store: SQLite + sqlite-vec, exact scoped cosine recall.

Implements bifrost's ``MemoryDataStore`` exactly. Every rule of the plane
(record shapes, limits, idempotency ids and digests, search validation, result
rows) comes from ``bifrost.memory``, the same code the reference store runs;
this module owns only persistence and ranking.

Writes run in one ``BEGIN IMMEDIATE`` transaction each: chunk rows, vec0 rows,
tombstones, the change counter and the idempotency entry commit together or not
at all. Searches rank on the in-process :class:`VectorIndex`, brought up to the
database's change counter inside the same read snapshot that then fetches the
winning records, and near-ties are re-ranked in float64 from the stored
embeddings (the float64 blob, see :mod:`ratatoskr.memory.records`) so ranking
and scores match the reference store. A search that leaves the embedding out
of its result never parses or builds it. Searches share the index (a
readers-writer lock); bringing it up to date takes it alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import apsw
import numpy as np

from bifrost.context import DispatchContext
from bifrost.errors import IdempotencyConflict, InvalidArguments, RevisionMismatch
from bifrost.idempotency import idempotency_id, request_digest, ttl_seconds
from bifrost.memory.capabilities import StoreCapabilities
from bifrost.memory.validation import (
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_TOP_K,
    SearchQuery,
    ValidatedChunk,
    search_row,
    validate_expected_revisions,
    validate_id,
    validate_ids,
    validate_search,
    validate_upsert,
)
from ratatoskr.memory import records
from ratatoskr.memory.index import (
    Candidate,
    ScopeItems,
    VectorIndex,
    scope_items,
    unit_float32,
    unit_float64,
)
from ratatoskr.memory.records import StoredChunk
from ratatoskr.memory.rwlock import ReadWriteLock
from ratatoskr.memory.schema import LEDGER, PLANE, migrations
from ratatoskr.sqlite import ConnectionOptions, Database, MetaSetting, StorageUnavailable, codec

# A float32 score of two unit vectors is within about dim * 2**-24 of the float64
# one (float32 rounding of the vectors, then dim float32 multiply-adds): every row
# within twice that, with room to spare, of the k-th float32 score is re-ranked
# exactly. 1e-4 covers dimensions up to ~670; beyond, the margin grows with dim.
_RERANK_MARGIN = 1e-4
# A search retries when a write of this process outran its read snapshot.
_SNAPSHOT_ATTEMPTS = 50
# Past this many changed rows another process wrote, reloading beats catching up.
_RELOAD_FRACTION = 0.25
_SQL_CHUNK = 500


def _chunks(items: Sequence[str], size: int = _SQL_CHUNK) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _placeholders(n: int) -> str:
    return ",".join("?" * n)


class RatatoskrMemoryStore:
    """A memory store over one database file (or ``":memory:"``)."""

    def __init__(
        self,
        db: Database,
        *,
        embedding_dim: int,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_top_k: int = DEFAULT_MAX_TOP_K,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self.embedding_dim = embedding_dim
        self.max_batch = max_batch
        self.max_top_k = max_top_k
        self._clock = clock
        self._index = VectorIndex(embedding_dim)
        self._index_lock = ReadWriteLock()
        self._margin = max(_RERANK_MARGIN, 3 * (embedding_dim + 2) * 2.0**-24)
        with self._db.read() as conn, self._index_lock.write():
            self._reload(conn, self._seq(conn))

    # -- descriptors -----------------------------------------------------------------

    def describe_store(self) -> dict[str, Any]:
        """Exactly the v1 capability dict (INV-006)."""
        return StoreCapabilities().to_dict()

    def health(self) -> dict[str, Any]:
        """Static facts plus a round trip to the database; never counts of data."""
        with self._db.read() as conn:
            conn.execute("SELECT 1").fetchall()
        return {
            "status": "ok",
            "plane": PLANE,
            "embedding_dim": self.embedding_dim,
            "distance": "cosine",
            "max_batch": self.max_batch,
            "max_top_k": self.max_top_k,
        }

    # -- writes ------------------------------------------------------------------------

    def upsert_many(
        self,
        records: list[dict[str, Any]],
        *,
        idempotency_key: str,
        ctx: DispatchContext,
        expected_revisions: dict[str, int] | None = None,
        idempotency_class: str | None = None,
    ) -> dict[str, Any]:
        """Persist chunks verbatim and index them, atomically and idempotently.

        Raises InvalidArguments, IdempotencyConflict, RevisionMismatch; on any error
        nothing is written.
        """
        chunks = validate_upsert(
            records,
            expected_revisions,
            idempotency_key,
            idempotency_class,
            embedding_dim=self.embedding_dim,
            max_batch=self.max_batch,
        )
        expected = validate_expected_revisions(expected_revisions, {c.id for c in chunks})
        digest = request_digest(records, expected_revisions)
        ledger_id = idempotency_id("upsert_many", ctx.actor, idempotency_key)
        now = self._clock()
        expires_at = now + ttl_seconds(idempotency_class)
        units = self._units([c.embedding for c in chunks])
        with self._db.write() as conn:
            entry = LEDGER.lookup(conn, ledger_id, now=now)
            if entry is not None:
                if entry.digest != digest:
                    raise IdempotencyConflict(
                        "idempotency_key was already used with a different payload"
                    )
                return {**entry.result, "replayed": True}
            current = self._revisions(conn, [c.id for c in chunks])
            for chunk_id, wanted in expected.items():
                actual = current.get(chunk_id, 0)
                if actual != wanted:
                    raise RevisionMismatch(chunk_id, wanted, actual)
            seq_before = self._seq(conn)
            seq = seq_before + 1 if chunks else seq_before
            if chunks:
                self._write_chunks(conn, chunks, units, current, seq, now)
                self._set_seq(conn, seq)
            result: dict[str, Any] = {"upserted": len(chunks), "replayed": False}
            LEDGER.record(conn, ledger_id, digest=digest, result=result, expires_at=expires_at)
        if chunks:
            self._apply(
                seq_before,
                seq,
                upserts=[(c.id, u, c.scope) for c, u in zip(chunks, units, strict=True)],
            )
        return result

    def _write_chunks(
        self,
        conn: apsw.Connection,
        chunks: list[ValidatedChunk],
        units: np.ndarray[Any, Any],
        current: dict[str, int],
        seq: int,
        now: float,
    ) -> None:
        inserts: list[tuple[Any, ...]] = []
        updates: list[tuple[Any, ...]] = []
        vec_inserts: list[tuple[Any, ...]] = []
        vec_updates: list[tuple[Any, ...]] = []
        for chunk, unit in zip(chunks, units, strict=True):
            form = records.stored_form(chunk.record)
            stored = (form.record_json, form.embedding_key, form.embedding_f64)
            scope_json = codec.dumps(dict(sorted(chunk.scope.items())))
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
                " revision, scope_json, origin, seq, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                inserts,
            )
            conn.executemany(
                "INSERT INTO memory_vec (chunk_id, embedding) VALUES (?, ?)", vec_inserts
            )
            conn.executemany(
                "DELETE FROM memory_tombstones WHERE chunk_id = ?", [(r[0],) for r in inserts]
            )
        if updates:
            conn.executemany(
                "UPDATE memory_chunks SET record_json = ?, embedding_key = ?, embedding_f64 = ?,"
                " revision = ?, scope_json = ?, origin = ?, seq = ?, updated_at = ?"
                " WHERE chunk_id = ?",
                updates,
            )
            conn.executemany("UPDATE memory_vec SET embedding = ? WHERE chunk_id = ?", vec_updates)

    def delete_many(self, ids: list[str]) -> dict[str, Any]:
        """Delete chunks and their index rows in one transaction.

        Returns ``{"deleted": N}``, N the distinct ids that existed. Raises InvalidArguments.
        """
        wanted = list(dict.fromkeys(validate_ids(ids, max_batch=self.max_batch)))
        with self._db.write() as conn:
            present = list(self._revisions(conn, wanted))
            seq_before = self._seq(conn)
            seq = seq_before + 1
            if present:
                rows = [(chunk_id,) for chunk_id in present]
                conn.executemany("DELETE FROM memory_chunks WHERE chunk_id = ?", rows)
                conn.executemany("DELETE FROM memory_vec WHERE chunk_id = ?", rows)
                conn.executemany(
                    "INSERT OR REPLACE INTO memory_tombstones (chunk_id, seq) VALUES (?, ?)",
                    [(chunk_id, seq) for chunk_id in present],
                )
                self._set_seq(conn, seq)
        if present:
            self._apply(seq_before, seq, deletes=present)
        return {"deleted": len(present)}

    # -- reads -------------------------------------------------------------------------

    def get(self, chunk_id: str) -> dict[str, Any] | None:
        """The record as written plus ``revision``, or None. Raises InvalidArguments."""
        validate_id(chunk_id, "chunk_id")
        with self._db.read() as conn:
            found = self._fetch(conn, [chunk_id])
        hit = found.get(chunk_id)
        return None if hit is None else {**hit.record(), "revision": hit.revision}

    def get_many(self, ids: list[str]) -> list[dict[str, Any]]:
        """Found records in the order asked, duplicates once. Raises InvalidArguments."""
        wanted = list(dict.fromkeys(validate_ids(ids, max_batch=self.max_batch)))
        with self._db.read() as conn:
            found = self._fetch(conn, wanted)
        return [{**found[i].record(), "revision": found[i].revision} for i in wanted if i in found]

    def search(
        self,
        vector: list[float],
        *,
        top_k: int,
        scope_all: dict[str, str] | None = None,
        scope_any: list[dict[str, str]] | None = None,
        metadata_filter: dict[str, Any] | None = None,
        include: dict[str, Any] | None = None,
        fidelity_target: Any = None,
    ) -> list[dict[str, Any]]:
        """The exact top_k in-scope chunks by cosine, best first, ties by chunk_id.

        Raises InvalidArguments / InvalidFilter. ``fidelity_target`` is ignored:
        search is always exact.
        """
        del fidelity_target
        query = validate_search(
            vector,
            top_k,
            scope_all,
            scope_any,
            metadata_filter,
            include,
            embedding_dim=self.embedding_dim,
            max_top_k=self.max_top_k,
        )
        exact_query = unit_float64(query.vector)
        unit = exact_query.astype(np.float32)
        for _attempt in range(_SNAPSHOT_ATTEMPTS):
            with self._db.read() as conn:
                db_seq = self._seq(conn)
                candidates = self._candidates(conn, db_seq, unit, query)
                if candidates is None:
                    # A write of this process committed after this snapshot began:
                    # take a newer snapshot so index and records agree.
                    continue
                found = self._fetch(conn, [c.chunk_id for c in candidates])
            break
        else:
            raise StorageUnavailable("the index could not catch up with concurrent writes")
        ids = list(found)
        scores = records.exact_scores([found[cid].vector() for cid in ids], exact_query)
        ranked = sorted(zip((-scores).tolist(), ids, strict=True))[: query.top_k]
        rows: list[dict[str, Any]] = []
        for neg, cid in ranked:
            hit = found[cid]
            if query.include_embedding:
                rows.append(search_row(hit.record(), cid, -neg, hit.revision, True))
            else:
                # Dropped here, not by search_row: without its embedding the record
                # may still hold a ``vector`` field (opaque when ``embedding`` was the
                # embedding), which search_row would then take for the embedding.
                rows.append(search_row(hit.without_embedding(), cid, -neg, hit.revision, True))
        return rows

    def _candidates(
        self, conn: apsw.Connection, db_seq: int, unit: np.ndarray[Any, Any], query: SearchQuery
    ) -> list[Candidate] | None:
        """Float32 candidates from the index at ``db_seq``, catching it up first if
        another process wrote; None when the index is already past ``db_seq``."""
        while True:
            with self._index_lock.read():
                if self._index.seq == db_seq:
                    rows = self._index.rows_in_scope(query.scope_all, query.scope_any)
                    return self._index.nearest(unit, query.top_k, rows, self._margin)
                if self._index.seq > db_seq:
                    return None
            with self._index_lock.write():
                self._catch_up(conn, db_seq)

    # -- plumbing ----------------------------------------------------------------------

    def count(self) -> int:
        """Number of stored chunks (for operators and tests; not a wire verb)."""
        with self._db.read() as conn:
            return int(conn.execute("SELECT count(*) FROM memory_chunks").fetchall()[0][0])  # type: ignore[arg-type]

    def close(self) -> None:
        """Close the database; idempotent."""
        self._db.close()

    @property
    def database(self) -> Database:
        return self._db

    @staticmethod
    def _seq(conn: apsw.Connection) -> int:
        row = conn.execute("SELECT value FROM memory_counters WHERE name = 'seq'").fetchall()
        return int(row[0][0])  # type: ignore[arg-type]

    @staticmethod
    def _set_seq(conn: apsw.Connection, seq: int) -> None:
        conn.execute("UPDATE memory_counters SET value = ? WHERE name = 'seq'", (seq,))

    @staticmethod
    def _revisions(conn: apsw.Connection, ids: Sequence[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for part in _chunks(ids):
            for chunk_id, revision in conn.execute(
                "SELECT chunk_id, revision FROM memory_chunks"
                f" WHERE chunk_id IN ({_placeholders(len(part))})",
                tuple(part),
            ):
                out[str(chunk_id)] = int(revision)
        return out

    @staticmethod
    def _fetch(conn: apsw.Connection, ids: Sequence[str]) -> dict[str, StoredChunk]:
        """Stored rows by id, undecoded: ``record_json`` is parsed when first used and
        the embedding blob is kept as bytes."""
        out: dict[str, StoredChunk] = {}
        for part in _chunks(ids):
            for chunk_id, record_json, key, blob, revision in conn.execute(
                "SELECT chunk_id, record_json, embedding_key, embedding_f64, revision"
                f" FROM memory_chunks WHERE chunk_id IN ({_placeholders(len(part))})",
                tuple(part),
            ):
                out[str(chunk_id)] = StoredChunk(
                    str(record_json),
                    None if key is None else str(key),
                    blob,
                    int(revision),
                )
        return out

    def _units(self, embeddings: list[list[float]]) -> np.ndarray[Any, Any]:
        """Float32 unit vectors of validated embeddings, a batch at a time (the steps of
        :func:`unit_float32`; the last bit may differ, which the re-rank margin absorbs)."""
        if not embeddings:
            return np.zeros((0, self.embedding_dim), dtype=np.float32)
        m = np.array(embeddings, dtype=np.float64)
        m /= np.max(np.abs(m), axis=1, keepdims=True)
        m /= np.linalg.norm(m, axis=1, keepdims=True)
        return m.astype(np.float32)

    def _apply(
        self,
        seq_before: int,
        seq_after: int,
        *,
        upserts: Sequence[tuple[str, np.ndarray[Any, Any], dict[str, str]]] = (),
        deletes: Sequence[str] = (),
    ) -> None:
        """Mirror a committed write into the index, if the index was current before it."""
        with self._index_lock.write():
            if self._index.seq != seq_before:
                return  # the next search catches up from the database
            for chunk_id in deletes:
                self._index.remove(chunk_id)
            for chunk_id, unit, scope in upserts:
                self._index.upsert(chunk_id, unit, scope)
            self._index.seq = seq_after

    def _catch_up(self, conn: apsw.Connection, db_seq: int) -> None:
        """Bring the index to ``db_seq`` (another process wrote); index lock held."""
        since = self._index.seq
        if since >= db_seq:
            return
        changed = int(
            conn.execute("SELECT count(*) FROM memory_chunks WHERE seq > ?", (since,)).fetchall()[
                0
            ][0]  # type: ignore[arg-type]
        )
        if changed > max(1000, _RELOAD_FRACTION * len(self._index)):
            self._reload(conn, db_seq)
            return
        for (chunk_id,) in conn.execute(
            "SELECT chunk_id FROM memory_tombstones WHERE seq > ?", (since,)
        ):
            self._index.remove(str(chunk_id))
        for chunk_id, scope_json in conn.execute(
            "SELECT chunk_id, scope_json FROM memory_chunks WHERE seq > ?", (since,)
        ).fetchall():
            blob = conn.execute(
                "SELECT embedding FROM memory_vec WHERE chunk_id = ?", (chunk_id,)
            ).fetchall()[0][0]
            vec = np.frombuffer(blob, dtype=np.float32)  # type: ignore[arg-type]
            self._index.upsert(str(chunk_id), unit_float32(vec), codec.loads(str(scope_json)))
        self._index.seq = db_seq

    def _reload(self, conn: apsw.Connection, db_seq: int) -> None:
        """Rebuild the index from the database snapshot of ``conn``; index lock held."""
        # Chunks share few distinct scopes: parse each once, and let rows share it.
        parsed: dict[str, ScopeItems] = {}
        scopes: dict[str, ScopeItems] = {}
        for cid, sj in conn.execute("SELECT chunk_id, scope_json FROM memory_chunks"):
            text = str(sj)
            items = parsed.get(text)
            if items is None:
                items = parsed[text] = scope_items(codec.loads(text))
            scopes[str(cid)] = items
        total = int(conn.execute("SELECT count(*) FROM memory_vec").fetchall()[0][0])  # type: ignore[arg-type]
        matrix = np.zeros((total, self.embedding_dim), dtype=np.float32)
        ids: list[str] = []
        for row, (cid, blob) in enumerate(
            conn.execute("SELECT chunk_id, embedding FROM memory_vec")
        ):
            matrix[row] = np.frombuffer(blob, dtype=np.float32)
            ids.append(str(cid))
        if len(ids) != total or len(scopes) != total or not all(i in scopes for i in ids):
            raise RuntimeError("memory_vec and memory_chunks disagree; run `ratatoskr doctor`")
        self._index.load(ids, matrix, [scopes[i] for i in ids])
        self._index.seq = db_seq


def open_memory_store(
    db_path: str,
    *,
    embedding_dim: int,
    max_batch: int = DEFAULT_MAX_BATCH,
    max_top_k: int = DEFAULT_MAX_TOP_K,
    clock: Callable[[], float] = time.time,
    options: ConnectionOptions | None = None,
) -> RatatoskrMemoryStore:
    """Open (creating schema and the vec index on first use) the memory store at ``db_path``.

    Raises InvalidArguments for a bad ``embedding_dim``; SchemaMismatch (naming both
    dimensions, file untouched) when the file was created with another dimension;
    StorageError subclasses for unusable files.
    """
    if isinstance(embedding_dim, bool) or not isinstance(embedding_dim, int) or embedding_dim < 1:
        raise InvalidArguments("embedding_dim must be a positive integer")
    base = options or ConnectionOptions()
    opts = ConnectionOptions(
        busy_timeout_ms=base.busy_timeout_ms,
        synchronous=base.synchronous,
        # Searches never scan SQLite (the index is in memory) and read a few rows
        # each, so memory-mapping buys nothing here, while every mapped page a
        # reload or a long-lived process touches counts in its RSS (256 MB by default).
        mmap_size=base.mmap_size if options is not None else 0,
        load_vec=True,
        readonly=base.readonly,
        max_page_count=base.max_page_count,
    )
    db = Database(
        db_path,
        plane=PLANE,
        migrations=migrations(embedding_dim),
        meta={"embedding_dim": MetaSetting(str(embedding_dim), "embedding_dim")},
        options=opts,
    )
    try:
        return RatatoskrMemoryStore(
            db, embedding_dim=embedding_dim, max_batch=max_batch, max_top_k=max_top_k, clock=clock
        )
    except BaseException:
        db.close()
        raise
