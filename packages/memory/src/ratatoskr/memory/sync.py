"""The in-process index kept in step with the database it caches.

A :class:`SyncedIndex` owns the :class:`~ratatoskr.memory.index.VectorIndex` of
an open store and the readers-writer lock around it. Its ``seq`` is the change
counter it was built to (see :mod:`ratatoskr.memory.changes`):

- this process's own writes are mirrored after they commit (:meth:`apply`), when
  the index was current before them;
- a search reads the counter in its read snapshot and, if another process wrote,
  catches up inside that snapshot (:meth:`candidates`): the rows and tombstones
  stamped since the index's ``seq`` are applied, or the whole index is reloaded
  when that is cheaper (past a quarter of the store) or impossible (tombstones it
  would need were pruned: its ``seq`` is below the horizon).

Searches share the index (read lock); only catching up and mirroring take it alone.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import apsw
import numpy as np

from bifrost.memory.validation import SearchQuery
from ratatoskr.memory import changes, quantized, sidecar
from ratatoskr.memory import records as stored_records
from ratatoskr.memory.index import Candidate, ScopeItems, VectorIndex, scope_items
from ratatoskr.memory.records import unit_float32, unit_rows
from ratatoskr.memory.rwlock import ReadWriteLock
from ratatoskr.memory.schema import PLANE, migrations
from ratatoskr.sqlite import StorageInconsistent, codec, schema_version

_T = TypeVar("_T")
# Past this many changed rows another process wrote, reloading beats catching up.
_RELOAD_FRACTION = 0.25
# Rows a rebuild normalises and codes at once: its float64 temporaries stay ~20 MB.
_RELOAD_BLOCK = 2048

# Tries of an erasure's sidecar rewrite to write the file under the read lock only.
_REWRITE_TRIES = 3

_DISAGREE = "memory_vec and memory_chunks disagree; run `ratatoskr doctor`"


def _count(conn: apsw.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM memory_chunks").fetchall()[0][0])  # type: ignore[arg-type]


def _adoptable(conn: apsw.Connection, image: sidecar.Image | None, db_seq: int) -> bool:
    """Whether an open may map ``image`` and catch it up from the change log (its
    changes since are all still recorded, and it is not ahead of the database)."""
    return image is not None and changes.horizon(conn) <= image.seq <= db_seq


class _CodedArrays:
    """The code arrays of a rebuild (zeroed pages: resident only once a block is
    written), filled block by block, and the coding errors' maxima."""

    def __init__(self, total: int, dim: int) -> None:
        self.arrays: list[np.ndarray[Any, Any]] = [
            np.zeros((total, dim), dtype=np.int8),
            np.zeros((total, dim), dtype=np.int8),
            np.zeros(total, dtype=np.float64),
            np.zeros(total, dtype=np.float64),
        ]
        self.errors = (0.0, 0.0)

    def store(self, rows: slice | np.ndarray[Any, Any], units: np.ndarray[Any, Any]) -> None:
        """Code the unit rows ``units`` into positions ``rows``."""
        codes = quantized.encode(units)
        for dst, src in zip(
            self.arrays, (codes.codes, codes.resid, codes.scale, codes.scale2), strict=True
        ):
            dst[rows] = src
        self.errors = (
            max(self.errors[0], float(codes.err1.max())),
            max(self.errors[1], float(codes.err2.max())),
        )


def _vec0_units(conn: apsw.Connection, ids: Sequence[str], dim: int) -> np.ndarray[Any, Any]:
    """The unit float32 vectors vec0 holds for ``ids`` (chunks stored as JSON).
    Raises StorageInconsistent when one is missing."""
    units = np.empty((len(ids), dim), dtype=np.float32)
    for j, cid in enumerate(ids):
        found = conn.execute(
            "SELECT embedding FROM memory_vec WHERE chunk_id = ?", (cid,)
        ).fetchall()
        if not found:
            raise StorageInconsistent(_DISAGREE)
        units[j] = unit_float32(np.frombuffer(found[0][0], dtype=np.float32))  # type: ignore[arg-type]
    return units


@dataclass(frozen=True)
class CacheVerdict:
    """What the next open of a store makes of its index sidecar (``ratatoskr doctor``)."""

    status: str  # "current" | "behind" (mapped, then caught up) | "rebuild" (from SQLite)
    detail: str


def cache_verdict(conn: apsw.Connection, dim: int) -> CacheVerdict:
    """Read-only: the sidecar of ``conn``'s file judged as :meth:`SyncedIndex.load`
    would judge it, without mapping more than its header and metadata for long."""
    path = sidecar.path_for(conn)
    if path is None or not os.path.exists(path):
        return CacheVerdict("rebuild", "no index cache: the next open builds it from SQLite")
    version, newest = schema_version(conn, PLANE), len(migrations(dim))
    if version < newest:  # a migration is recorded in the lineage: the file is rejected
        return CacheVerdict(
            "rebuild", f"schema v{version} migrates to v{newest} first, then the index is rebuilt"
        )
    image = sidecar.read(path, dim, lineage=sidecar.lineage(conn))
    db_seq = changes.seq(conn)
    size = f"{os.path.getsize(path) / 2**20:,.1f} MiB"
    if image is None or not _adoptable(conn, image, db_seq):
        return CacheVerdict(
            "rebuild",
            f"{path} ({size}) is not this database's or too old: the next open rebuilds it",
        )
    rows = f"{len(image.ids):,} chunks, {size}"
    if image.seq == db_seq:
        return CacheVerdict("current", f"{path}: {rows}, current (the next open maps it)")
    behind = db_seq - image.seq
    return CacheVerdict(
        "behind",
        f"{path}: {rows}, {behind:,} change{'s' if behind != 1 else ''} behind"
        " (mapped, then caught up)",
    )


class SyncedIndex:
    """The vector index of one open store and what keeps it current."""

    def __init__(self, dim: int, fields: Sequence[str] = ()) -> None:
        self.dim = dim
        self.index = VectorIndex(dim, fields=fields)
        self.lock = ReadWriteLock()
        # Tombstones hold digests of ids: this maps them back (see changes.py).
        self._digests = changes.Digests()
        # The seq of the sidecar this index was last read from or written to (None:
        # none yet), so that a close after no write leaves the file alone.
        self._saved_seq: int | None = None

    @property
    def seq(self) -> int:
        return self.index.seq

    def load(self, conn: apsw.Connection) -> None:
        """Build the index for ``conn``'s snapshot (at open): from the sidecar file when
        it describes this database (mapped, then caught up from the change log), else
        from SQLite; then leave a sidecar current to this snapshot for the next open
        (best effort: it is a cache, see :mod:`ratatoskr.memory.sidecar`)."""
        with self.lock.write():
            db_seq = changes.seq(conn)
            path = sidecar.path_for(conn)
            if path is None:
                self._reload(conn, db_seq)
                return
            origin = sidecar.lineage(conn)
            image = sidecar.read(path, self.dim, lineage=origin)
            current = False
            if image is not None and _adoptable(conn, image, db_seq):
                self.index.adopt(image)
                self._digests.forget_all()
                self._catch_up(conn, db_seq)
                if len(self.index) != _count(conn):
                    self._reload(conn, db_seq)
                else:
                    current = image.seq == db_seq
                    self._fill(conn)  # the sidecar holds no filter columns
            else:
                self._reload(conn, db_seq)
            if current:
                self._saved_seq = db_seq
            else:
                self._write(path, origin)

    def save(self, conn: apsw.Connection) -> None:
        """Leave a sidecar current to the index (at close), so the next open maps it
        instead of catching up on every write since this one opened: only when the
        index is current to ``conn``'s snapshot and moved since its sidecar was read or
        written (best effort, like every sidecar write)."""
        with self.lock.write():
            path = sidecar.path_for(conn)
            if path is None or self.index.seq == self._saved_seq:
                return
            if self.index.seq != changes.seq(conn):
                return  # behind another process's writes: its own close keeps the file
            self._write(path, sidecar.lineage(conn))

    def rewrite(self, conn: apsw.Connection) -> None:
        """After an erasure: write the sidecar again from the index caught up to
        ``conn``'s snapshot, so the file no longer holds the erased ids and codes; when
        it cannot be written, remove it (a cache: the next open rebuilds). Nothing to
        do when there is no sidecar."""
        path = sidecar.path_for(conn)
        if path is None or not os.path.exists(path):
            return
        origin = sidecar.lineage(conn)
        for _attempt in range(_REWRITE_TRIES):
            # Alone only to catch up and lay the index out tight (its image is then
            # views of its arrays); the file (~0.5 s at 100k chunks) is written under the
            # read lock, so searches go on meanwhile. A write that slipped in between
            # (the seq moved) makes another try; the last one keeps the lock throughout.
            with self.lock.write():
                self._catch_up(conn, changes.seq(conn))
                if _attempt == _REWRITE_TRIES - 1:
                    self._write_or_remove(path, self.index.image(), origin)
                    return
                image = self.index.image()
            with self.lock.read():
                if self.index.seq == image.seq:
                    self._write_or_remove(path, image, origin)
                    return

    def _write_or_remove(self, path: str, image: sidecar.Image, origin: str) -> None:
        """Write ``image`` (an index lock held), or remove the file when that fails."""
        self._write(path, origin, image)
        if self._saved_seq != image.seq:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def _write(self, path: str, origin: str, image: sidecar.Image | None = None) -> None:
        """Write the sidecar of the index, or ``image`` of it (a lock held); an OSError
        leaves it unwritten."""
        with contextlib.suppress(OSError):
            image = image or self.index.image()
            sidecar.write(path, image, lineage=origin)
            self._saved_seq = image.seq

    def candidates(
        self, conn: apsw.Connection, db_seq: int, unit: np.ndarray[Any, Any], query: SearchQuery
    ) -> list[Candidate] | None:
        """Float32 candidates from the index at ``db_seq``, catching it up first if
        another process wrote; None when the index is already past ``db_seq``."""
        while True:
            with self.lock.read():
                if self.index.seq == db_seq:
                    return self.index.search(
                        unit, query.top_k, query.scope_all, query.scope_any, query.metadata_filter
                    )
                if self.index.seq > db_seq:
                    return None
            with self.lock.write():
                self._catch_up(conn, db_seq)

    def current(
        self, unit: np.ndarray[Any, Any], query: SearchQuery
    ) -> tuple[int, list[Candidate]]:
        """The index's ``seq`` and its candidates at that ``seq``, whatever the database
        holds (a search then checks the ``seq`` in its snapshot, see
        :meth:`candidates`)."""
        with self.lock.read():
            return self.index.seq, self.index.search(
                unit, query.top_k, query.scope_all, query.scope_any, query.metadata_filter
            )

    def read_now(self, read: Callable[[VectorIndex], _T]) -> tuple[int, _T]:
        """``read(index)`` and the index's ``seq``, whatever the database holds (the
        caller checks the ``seq`` in its snapshot, then :meth:`read_at`)."""
        with self.lock.read():
            return self.index.seq, read(self.index)

    def read_at(
        self, conn: apsw.Connection, db_seq: int, read: Callable[[VectorIndex], _T]
    ) -> tuple[bool, _T | None]:
        """``(True, read(index))`` with the index at ``db_seq`` (caught up first when
        another process wrote), or ``(False, None)`` when it is already past it."""
        while True:
            with self.lock.read():
                if self.index.seq == db_seq:
                    return True, read(self.index)
                if self.index.seq > db_seq:
                    return False, None
            with self.lock.write():
                self._catch_up(conn, db_seq)

    def apply(
        self,
        seq_before: int,
        seq_after: int,
        *,
        upserts: tuple[Sequence[str], np.ndarray[Any, Any], Sequence[dict[str, str]]] | None = None,
        deletes: Sequence[str] = (),
        records: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Mirror a committed write into the index, if the index was current before it:
        ``upserts`` are the ids, their float32 unit rows (one matrix) and scopes;
        ``records`` the upserted records (for the filter columns)."""
        with self.lock.write():
            if self.index.seq != seq_before:
                return  # the next search catches up from the database
            for chunk_id in deletes:
                self.index.remove(chunk_id)
            if upserts is not None:
                self._digests.learn(upserts[0])
                self.index.upsert_many(*upserts, records=records)
            self.index.seq = seq_after

    def _catch_up(self, conn: apsw.Connection, db_seq: int) -> None:
        """Bring the index to ``db_seq`` (another process wrote); lock held.

        Reloads instead when tombstones the index would need were pruned (it is older
        than the horizon), or when reloading is cheaper than applying the changes.
        """
        since = self.index.seq
        if since >= db_seq:
            return
        if since < changes.horizon(conn):
            self._reload(conn, db_seq)
            return
        changed = int(
            conn.execute("SELECT count(*) FROM memory_chunks WHERE seq > ?", (since,)).fetchall()[
                0
            ][0]  # type: ignore[arg-type]
        )
        if changed > max(1000, _RELOAD_FRACTION * len(self.index)):
            self._reload(conn, db_seq)
            return
        buried = changes.buried_since(conn, since)
        for gone in self._digests.resolve(conn, buried, self.index._row):
            self.index.remove(gone)
        for chunk_id, scope_json, record_json, key, f64, f32 in conn.execute(
            "SELECT chunk_id, scope_json, record_json, embedding_key, embedding_f64,"
            " embedding_f32 FROM memory_chunks WHERE seq > ?",
            (since,),
        ).fetchall():
            blob = conn.execute(
                "SELECT embedding FROM memory_vec WHERE chunk_id = ?", (chunk_id,)
            ).fetchall()[0][0]
            vec = np.frombuffer(blob, dtype=np.float32)  # type: ignore[arg-type]
            self._digests.learn([str(chunk_id)])
            records = [self._record(record_json, key, f64, f32)] if self.index.columns else None
            self.index.upsert_many(
                [str(chunk_id)],
                unit_float32(vec).reshape(1, -1),
                [codec.loads(str(scope_json))],
                records=records,
            )
        self.index.seq = db_seq

    def _record(self, record_json: Any, key: Any, f64: Any, f32: Any) -> dict[str, Any]:
        """The stored record as the filter columns need it: its JSON alone, unless a
        declared field reads the embedding (then the whole record)."""
        wants_embedding = any(
            f.split(".", 1)[0] in ("embedding", "vector") for f in self.index.columns.fields
        )
        if wants_embedding:
            chunk = stored_records.StoredChunk(
                str(record_json), None if key is None else str(key), f64, 1, f32
            )
            return chunk.record()
        loaded: dict[str, Any] = stored_records.load_json(str(record_json))
        return loaded

    def _fill(self, conn: apsw.Connection) -> None:
        """Set every row's filter columns from the records of ``conn``'s snapshot (at
        open and after a rebuild: declaring a field indexes the rows already stored);
        lock held. Nothing to do without declared fields."""
        columns = self.index.columns
        if not columns:
            return
        for chunk_id, record_json, key, f64, f32 in conn.execute(
            "SELECT chunk_id, record_json, embedding_key, embedding_f64, embedding_f32"
            " FROM memory_chunks"
        ):
            row = self.index.row_of(str(chunk_id))
            if row is not None:
                columns.write(row, self._record(record_json, key, f64, f32))

    def _reload(self, conn: apsw.Connection, db_seq: int) -> None:
        """Rebuild the index from the database snapshot of ``conn``; lock held.

        One pass over ``memory_chunks``: the float64 blobs of a block of chunks (binary
        form) are made unit float32 rows and coded at once, into code arrays in read
        order (never a float32 matrix of the whole store: a rebuild's peak is the codes
        twice over, while they are laid out class by class); only chunks stored as JSON
        (an int in the embedding) read their unit vector from vec0, and are coded
        again from it. Raises StorageInconsistent when vec0 and the chunks disagree.
        """
        total = _count(conn)
        self._digests.forget_all()
        coded = _CodedArrays(total, self.dim)
        ids: list[str] = []
        scopes: list[ScopeItems] = []
        # Chunks share few distinct scopes: parse each once, and let rows share it.
        parsed: dict[str, ScopeItems] = {}
        json_rows: list[int] = []
        block: list[bytes] = []
        # A stand-in for a JSON-form row until vec0 gives its vector (any non-zero row;
        # its coding errors count in the maxima, and a larger bound is still a bound).
        filler = np.ones(self.dim, dtype="<f8").tobytes()

        def flush() -> None:
            raw = np.frombuffer(b"".join(block), dtype="<f8").reshape(len(block), self.dim)
            end = len(ids)
            coded.store(slice(end - len(block), end), unit_rows(raw).astype(np.float32))
            block.clear()

        for cid, sj, f64, f32 in conn.execute(
            "SELECT chunk_id, scope_json, embedding_f64, embedding_f32 FROM memory_chunks"
        ):
            # A float32 blob widens exactly: the rows hold the embedding's own values.
            blob = f64 if f32 is None else np.frombuffer(f32, dtype="<f4").astype("<f8").tobytes()
            text = str(sj)
            items = parsed.get(text)
            if items is None:
                items = parsed[text] = scope_items(codec.loads(text))
            if blob is None:
                json_rows.append(len(ids))
            ids.append(str(cid))
            scopes.append(items)
            block.append(filler if blob is None else blob)
            if len(block) == _RELOAD_BLOCK:
                flush()
        if block:
            flush()
        if len(ids) != total:
            raise StorageInconsistent(_DISAGREE)
        if json_rows:
            rows = np.asarray(json_rows, dtype=np.int64)
            coded.store(rows, _vec0_units(conn, [ids[r] for r in json_rows], self.dim))
        vec_total = int(conn.execute("SELECT count(*) FROM memory_vec").fetchall()[0][0])  # type: ignore[arg-type]
        if vec_total != total:
            raise StorageInconsistent(_DISAGREE)
        self.index.load_coded(ids, coded.arrays, scopes, coded.errors)
        self.index.seq = db_seq
        self._fill(conn)
