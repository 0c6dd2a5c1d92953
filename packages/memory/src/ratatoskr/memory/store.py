"""The durable memory store: SQLite + sqlite-vec, exact scoped cosine recall.

Implements bifrost's ``MemoryDataStore`` exactly. Every rule of the plane
(record shapes, limits, idempotency ids and digests, search validation, result
rows) comes from ``bifrost.memory``, the same code the reference store runs;
this module owns only persistence and ranking.

Writes run in one ``BEGIN IMMEDIATE`` transaction each: chunk rows, vec0 rows,
tombstones, the change counter and the idempotency entry commit together or not
at all. Searches rank on the in-process :class:`VectorIndex`, brought up to the
database's change counter inside the same read snapshot that then fetches the
winning records, and near-ties are re-ranked in float64 from the verbatim
embeddings so ranking and scores match the reference store.
"""

from __future__ import annotations

import threading
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
    ValidatedChunk,
    embedding_field,
    search_row,
    validate_expected_revisions,
    validate_id,
    validate_ids,
    validate_search,
    validate_upsert,
)
from ratatoskr.memory.index import VectorIndex, unit_float32, unit_float64
from ratatoskr.memory.schema import LEDGER, PLANE, migrations
from ratatoskr.sqlite import ConnectionOptions, Database, MetaSetting, codec

# float32 scores of unit vectors are within ~1e-6 of the float64 ones; every row
# this close to the k-th float32 score is re-ranked exactly.
_RERANK_MARGIN = 1e-4
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
        self._index_lock = threading.Lock()
        with self._db.read() as conn, self._index_lock:
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
        units = [unit_float32(c.embedding) for c in chunks]
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
        units: list[np.ndarray[Any, Any]],
        current: dict[str, int],
        seq: int,
        now: float,
    ) -> None:
        inserts: list[tuple[Any, ...]] = []
        updates: list[tuple[Any, ...]] = []
        vec_inserts: list[tuple[Any, ...]] = []
        vec_updates: list[tuple[Any, ...]] = []
        for chunk, unit in zip(chunks, units, strict=True):
            record_json = codec.dumps(chunk.record)
            scope_json = codec.dumps(dict(sorted(chunk.scope.items())))
            origin = chunk.record.get("origin")
            origin_col = origin if isinstance(origin, str) else None
            # vec0 holds the unit vector: cosine ignores scale, and a raw float32 cast
            # would overflow (1e308) or flush to zero (subnormals).
            blob = unit.tobytes()
            if chunk.id in current:
                updates.append(
                    (record_json, current[chunk.id] + 1, scope_json, origin_col, seq, now, chunk.id)
                )
                vec_updates.append((blob, chunk.id))
            else:
                inserts.append((chunk.id, record_json, 1, scope_json, origin_col, seq, now))
                vec_inserts.append((chunk.id, blob))
        if inserts:
            conn.executemany(
                "INSERT INTO memory_chunks"
                " (chunk_id, record_json, revision, scope_json, origin, seq, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
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
                "UPDATE memory_chunks SET record_json = ?, revision = ?, scope_json = ?,"
                " origin = ?, seq = ?, updated_at = ? WHERE chunk_id = ?",
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
        """The verbatim record plus ``revision``, or None. Raises InvalidArguments."""
        validate_id(chunk_id, "chunk_id")
        with self._db.read() as conn:
            found = self._fetch(conn, [chunk_id])
        hit = found.get(chunk_id)
        return None if hit is None else {**hit[0], "revision": hit[1]}

    def get_many(self, ids: list[str]) -> list[dict[str, Any]]:
        """Found records in the order asked, duplicates once. Raises InvalidArguments."""
        wanted = list(dict.fromkeys(validate_ids(ids, max_batch=self.max_batch)))
        with self._db.read() as conn:
            found = self._fetch(conn, wanted)
        return [{**found[i][0], "revision": found[i][1]} for i in wanted if i in found]

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
        unit = unit_float32(query.vector)
        exact_query = unit_float64(query.vector)
        for _attempt in range(3):
            with self._db.read() as conn:
                db_seq = self._seq(conn)
                with self._index_lock:
                    self._catch_up(conn, db_seq)
                    if self._index.seq != db_seq:
                        # A write of this process committed after this snapshot began:
                        # take a newer snapshot so index and records agree.
                        continue
                    rows = self._index.rows_in_scope(query.scope_all, query.scope_any)
                    candidates = self._index.nearest(unit, query.top_k, rows, _RERANK_MARGIN)
                found = self._fetch(conn, [c.chunk_id for c in candidates])
            break
        ranked: list[tuple[float, str]] = []
        for cand in candidates:
            hit = found.get(cand.chunk_id)
            if hit is None:
                continue
            record = hit[0]
            cosine = float(unit_float64(record[embedding_field(record)]) @ exact_query)
            score = max(-1.0, min(1.0, cosine))
            ranked.append((-score, cand.chunk_id))
        ranked.sort()
        return [
            search_row(found[cid][0], cid, -neg, found[cid][1], query.include_embedding)
            for neg, cid in ranked[: query.top_k]
        ]

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
    def _fetch(conn: apsw.Connection, ids: Sequence[str]) -> dict[str, tuple[dict[str, Any], int]]:
        out: dict[str, tuple[dict[str, Any], int]] = {}
        for part in _chunks(ids):
            for chunk_id, record_json, revision in conn.execute(
                "SELECT chunk_id, record_json, revision FROM memory_chunks"
                f" WHERE chunk_id IN ({_placeholders(len(part))})",
                tuple(part),
            ):
                out[str(chunk_id)] = (codec.loads(str(record_json)), int(revision))
        return out

    def _apply(
        self,
        seq_before: int,
        seq_after: int,
        *,
        upserts: Sequence[tuple[str, np.ndarray[Any, Any], dict[str, str]]] = (),
        deletes: Sequence[str] = (),
    ) -> None:
        """Mirror a committed write into the index, if the index was current before it."""
        with self._index_lock:
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
        scopes = {
            str(cid): codec.loads(str(sj))
            for cid, sj in conn.execute("SELECT chunk_id, scope_json FROM memory_chunks")
        }
        total = int(conn.execute("SELECT count(*) FROM memory_vec").fetchall()[0][0])  # type: ignore[arg-type]
        matrix = np.zeros((total, self.embedding_dim), dtype=np.float32)
        ids: list[str] = []
        for row, (cid, blob) in enumerate(
            conn.execute("SELECT chunk_id, embedding FROM memory_vec")
        ):
            matrix[row] = np.frombuffer(blob, dtype=np.float32)
            ids.append(str(cid))
        if len(ids) != total or set(ids) != set(scopes):
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
        mmap_size=base.mmap_size,
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
