"""The VMP store: records, document/chunk nodes, edges and metadata in SQLite.

Every write is one ``BEGIN IMMEDIATE`` transaction of the shared
:class:`ratatoskr.sqlite.Database` (record + nodes + edge + metadata + counters,
all or nothing). Searches answer from an in-memory copy of the vectors
(:mod:`ratatoskr.vmp.index`), kept in step with the file: a write appends its
row after commit, and a search reads the counters in the same snapshot as the
hits' metadata and, when they show rows the index lacks (written by another
process) or another epoch (a restore), loads them or reloads everything.

**The probe.** Most searches answer from memory: the index's rows, and
which records have metadata (:mod:`ratatoskr.vmp.tagged`). What proves them the
file's is one statement of the counters — ``next_record_id``, ``epoch`` and
``metadata_changes`` — run on the store's probe: a read-only connection of its
own that runs nothing else, in autocommit (one statement reads one snapshot, so
it needs no ``BEGIN``/``COMMIT``, which with their context managers cost about
as much again). Records are append-only within an epoch, and every update of a
record's metadata bumps ``metadata_changes`` (a trigger, whoever writes), so
equal counters mean the rows and flags held are the file's. Hits with metadata
are read in a second statement that reads the counters again, and stands only
if they are unchanged. Otherwise — another process's write or a restore, flags
not yet reloaded, a probe busy in another thread, a database in memory (one
connection, no probe) — the search takes the general route: one read
transaction through the thread's reader that loads what is missing, then reads
the hits' metadata.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any, NamedTuple, Unpack

import apsw
import numpy as np

from ratatoskr.sqlite import (
    ConnectionOptions,
    Database,
    MetaSetting,
    StorageError,
    StorageFull,
    codec,
    connect,
    translate_errors,
)
from ratatoskr.vmp.canonical import MAX_JSON_BYTES, canonical_json
from ratatoskr.vmp.errors import (
    CapacityExceeded,
    InternalError,
    InvalidArgument,
    NotFound,
    VmpError,
)
from ratatoskr.vmp.fixedpoint import MAX_DIM, score_of, to_fixed_array, to_fixed_vector
from ratatoskr.vmp.index import ExactIndex, IndexView, Int32Matrix, Int64Array
from ratatoskr.vmp.interface import ClosesOnExit, UpsertOptions, upsert_fields
from ratatoskr.vmp.schema import (
    EDGE_PARENT_OF,
    MIGRATIONS,
    NODE_CHUNK,
    NODE_DOCUMENT,
    PLANE,
)
from ratatoskr.vmp.snapshot import (
    EdgeRow,
    NodeRow,
    RecordRow,
    SnapshotCounts,
    VmpState,
    check_snapshot,
    encode_snapshot,
    open_snapshot,
    state_hash,
)
from ratatoskr.vmp.tagged import MetadataFlags

MAX_K = 1000
MAX_U32 = 0xFFFFFFFF
# Nodes are u32 and an upsert may add two of them, so records stay below 2**31.
MAX_RECORDS_LIMIT = 2**31 - 1
DEFAULT_DIM = 16
DEFAULT_MAX_RECORDS = 1_000_000

_TARGET = re.compile(r"(rec|node):(0|[1-9][0-9]{0,9})")


@dataclass(frozen=True)
class UpsertResult:
    """What an upsert assigned."""

    record_id: int
    document_node_id: int
    chunk_node_id: int

    @property
    def memory_id(self) -> str:
        return f"rec:{self.record_id}"

    def to_json(self) -> dict[str, Any]:
        """The wire shape of ``mem.upsert_vector``."""
        return {
            "memory_id": self.memory_id,
            "record_id": self.record_id,
            "document_node_id": self.document_node_id,
            "chunk_node_id": self.chunk_node_id,
        }


class SearchHit(NamedTuple):
    """One search result; ``squared_distance`` is exact, in squared Q16.16 units.

    A named tuple rather than a frozen dataclass: a search builds k of them, and a
    tuple is built in half the time."""

    record_id: int
    squared_distance: int
    metadata: Any

    @property
    def memory_id(self) -> str:
        return f"rec:{self.record_id}"

    @property
    def score(self) -> float:
        """The squared L2 distance in real units (``squared_distance / 2**32``)."""
        return score_of(self.squared_distance)

    def to_json(self) -> dict[str, Any]:
        """The wire shape of one ``mem.search_vector`` result."""
        return {
            "memory_id": self.memory_id,
            "record_id": self.record_id,
            "score": self.score,
            "metadata": self.metadata,
        }


def parse_target(target_id: object) -> tuple[str, int] | None:
    """``"rec:N"`` / ``"node:N"`` (N a canonical decimal u32) as (kind, N); None otherwise."""
    if not isinstance(target_id, str):
        return None
    match = _TARGET.fullmatch(target_id)
    if match is None:
        return None
    number = int(match.group(2))
    return (match.group(1), number) if number <= MAX_U32 else None


class _StorageErrors:
    """Storage failures as VMP errors (their messages are content-free already).

    A class rather than a ``@contextmanager`` generator: every search enters it, and
    this costs a fraction of a generator's set-up.
    """

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None or isinstance(exc, VmpError):
            return
        if isinstance(exc, StorageFull):
            raise CapacityExceeded("storage is full") from exc
        if isinstance(exc, StorageError):
            raise InternalError(f"storage error: {exc.message}") from exc


_STORAGE_ERRORS = _StorageErrors()


def _storage_errors() -> _StorageErrors:
    return _STORAGE_ERRORS


class VmpStore(ClosesOnExit):
    """One VMP memory. Thread-safe; use :func:`open_vmp_store` to get one."""

    def __init__(self, db: Database, *, dim: int, max_records: int) -> None:
        self._db = db
        self.dim = dim
        self.max_records = max_records
        self._index = ExactIndex(dim)
        self._flags = MetadataFlags()
        # The probe (module docstring) and the lock that keeps it to one thread at a time.
        self._probe_lock = threading.Lock()
        self._probe: apsw.Connection | None = None
        with _storage_errors():
            if not db.is_memory:
                self._probe = connect(db.path, dataclasses.replace(db.options, readonly=True))
            try:
                with self._db.read() as conn:
                    self._sync(conn)  # load the vectors now rather than on the first search
            except BaseException:
                self._close_probe()
                raise

    @property
    def directory(self) -> str | None:
        """The directory of the database file; None for a store in memory.

        Where the app spools an upload: on the volume the restored data goes to,
        not in a temporary directory that may live in RAM (tmpfs).
        """
        if self._db.is_memory:
            return None
        return os.path.dirname(os.path.abspath(self._db.path))

    def close(self) -> None:
        """Close the database; later calls fail with INTERNAL_ERROR. Idempotent."""
        self._close_probe()
        self._db.close()
        self._index.invalidate()
        self._flags.forget()

    def _close_probe(self) -> None:
        with self._probe_lock:
            probe, self._probe = self._probe, None
        if probe is not None:
            probe.close()

    # -- writes ---------------------------------------------------------------

    def upsert_vector(
        self, vector: Sequence[float], **options: Unpack[UpsertOptions]
    ) -> UpsertResult:
        """Store one vector as a new record with a chunk node, in one transaction.

        ``options``: ``attach_to_document_node``, ``tags``, ``metadata``
        (:class:`~ratatoskr.vmp.interface.UpsertOptions`). Without
        ``attach_to_document_node`` a new document node is created first.
        Raises DimMismatch (length ≠ dim), InvalidArgument (types, range),
        NotFound (``attach_to_document_node`` is not a document node; nothing is
        written), CapacityExceeded (``max_records`` reached or disk full); TypeError
        for another keyword.
        """
        attach_to_document_node, tags, metadata = upsert_fields(options)
        fixed = to_fixed_vector(vector, self.dim)
        document = _check_u32(attach_to_document_node, "attach_to_document_node")
        tags_json = _tags_json(tags)
        metadata_json = _field_json(metadata, "metadata")
        blob = np.asarray(fixed, dtype="<i4").tobytes()
        with _storage_errors(), self._db.write() as conn:
            next_record, next_node, epoch, version = _counters(conn)
            if next_record >= self.max_records:
                raise CapacityExceeded(f"the store holds its maximum of {self.max_records} records")
            if document is None:
                document, chunk, new_next_node = next_node, next_node + 1, next_node + 2
            else:
                if _node_kind(conn, document) != NODE_DOCUMENT:
                    raise NotFound(f"document node {document} does not exist")
                chunk, new_next_node = next_node, next_node + 1
            if new_next_node > MAX_U32:
                raise CapacityExceeded("node ids are exhausted")
            if document == next_node:
                conn.execute(
                    "INSERT INTO vmp_nodes (node_id, kind, record_id, metadata)"
                    " VALUES (?, ?, NULL, NULL)",
                    (document, NODE_DOCUMENT),
                )
            conn.execute(
                "INSERT INTO vmp_records (record_id, vector, tags, metadata) VALUES (?, ?, ?, ?)",
                (next_record, blob, tags_json, metadata_json),
            )
            conn.execute(
                "INSERT INTO vmp_nodes (node_id, kind, record_id, metadata) VALUES (?, ?, ?, NULL)",
                (chunk, NODE_CHUNK, next_record),
            )
            conn.execute(
                "INSERT INTO vmp_edges (src, dst, kind) VALUES (?, ?, ?)",
                (document, chunk, EDGE_PARENT_OF),
            )
            conn.execute(
                "UPDATE vmp_state SET next_record_id = ?, next_node_id = ? WHERE id = 0",
                (next_record + 1, new_next_node),
            )
        self._index.append_if_next(epoch, next_record, fixed)
        self._flags.inserted(epoch, version, next_record, metadata_json is not None)
        return UpsertResult(next_record, document, chunk)

    def set_metadata(self, target_id: str, metadata: Any) -> None:
        """Replace the metadata of ``rec:N`` or ``node:N`` (None clears it).

        Raises InvalidArgument (malformed target or metadata), NotFound (no such record/node).
        """
        target = parse_target(target_id)
        if target is None:
            raise InvalidArgument('target_id must be "rec:<id>" or "node:<id>"')
        text = _field_json(metadata, "metadata")
        kind, number = target
        table, column = ("vmp_records", "record_id") if kind == "rec" else ("vmp_nodes", "node_id")
        with _storage_errors(), self._db.write() as conn:
            _, _, epoch, before = _counters(conn)
            conn.execute(f"UPDATE {table} SET metadata = ? WHERE {column} = ?", (text, number))
            if conn.changes() != 1:
                raise NotFound(f"{kind}:{number} does not exist")
        if kind == "rec":
            self._flags.updated(epoch, before, number, text is not None)

    def restore(self, blob: bytes) -> None:
        """Replace the whole state by the snapshot ``blob``, atomically.

        The same as :meth:`restore_from_file` over the blob. Raises InvalidArgument
        (corrupt, truncated, foreign, other dim), CapacityExceeded (more records
        than ``max_records``, or a full disk); on any error the current state is
        untouched.
        """
        if not isinstance(blob, bytes | bytearray | memoryview):
            raise InvalidArgument("a snapshot is a byte string")
        # BytesIO over bytes shares the buffer: the blob is not copied.
        self._restore(io.BytesIO(blob))

    def restore_from_file(self, file: str | os.PathLike[str] | IO[bytes]) -> None:
        """Replace the whole state by the snapshot in ``file``, atomically.

        ``file`` is a path or a seekable binary file, read from its current position
        to its end. Memory stays bounded by a batch of records' fields (plus two
        bytes per node), whatever the snapshot's size: a first pass checks the
        checksum, a second every record, node and edge without keeping them, and
        only then one write transaction replaces every table while a third pass
        reads the rows again — refusing, and so rolling back, unless they are the
        bytes the second pass checked (same checksum): a file changed in between
        is refused too. Raises InvalidArgument
        (corrupt, truncated, foreign, other dim, unreadable file), CapacityExceeded
        (more than ``max_records`` records, or a full disk); on any error the
        current state is untouched.
        """
        if isinstance(file, str | os.PathLike):
            try:
                opened = open(file, "rb")  # noqa: SIM115 (closed below, errors mapped)
            except OSError as exc:
                raise InvalidArgument("snapshot file cannot be opened") from exc
            with opened:
                self._restore(opened)
            return
        if _is_text(file) or not file.seekable():
            raise InvalidArgument("a snapshot is read from a seekable binary file")
        self._restore(file)

    def _restore(self, file: IO[bytes]) -> None:
        try:
            start = file.tell()
            counts = check_snapshot(file, dim=self.dim)
            self._check_capacity(counts)
            file.seek(start)
            with _storage_errors(), self._db.write() as conn:
                body = open_snapshot(
                    file, dim=self.dim, verify_checksum=False, checked=counts.checksum
                )
                self._check_capacity(body.counts)
                conn.execute(
                    "DELETE FROM vmp_edges; DELETE FROM vmp_nodes; DELETE FROM vmp_records;"
                )
                conn.executemany(
                    "INSERT INTO vmp_records (record_id, vector, tags, metadata)"
                    " VALUES (?, ?, ?, ?)",
                    body.records(),
                )
                conn.executemany(
                    "INSERT INTO vmp_nodes (node_id, kind, record_id, metadata)"
                    " VALUES (?, ?, ?, ?)",
                    body.nodes(),
                )
                conn.executemany(
                    "INSERT INTO vmp_edges (src, dst, kind) VALUES (?, ?, ?)", body.edges()
                )
                body.finish()
                conn.execute(
                    "UPDATE vmp_state SET next_record_id = ?, next_node_id = ?, epoch = epoch + 1"
                    " WHERE id = 0",
                    (body.counts.next_record_id, body.counts.next_node_id),
                )
        except OSError as exc:
            raise InternalError(f"snapshot file could not be read ({type(exc).__name__})") from exc
        self._index.invalidate()
        self._flags.forget()

    def _check_capacity(self, counts: SnapshotCounts) -> None:
        if counts.records > self.max_records:
            raise CapacityExceeded(
                f"the snapshot holds more than this store's maximum of {self.max_records} records"
            )

    # -- reads ----------------------------------------------------------------

    def search_vector(self, query_vector: Sequence[float], k: int) -> list[SearchHit]:
        """The ``k`` nearest records by exact squared L2, ascending, ties by lower record_id.

        Raises InvalidArgument (k not an integer in 1…1000, bad values), DimMismatch.
        """
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise InvalidArgument(f"k must be an integer within 1…{MAX_K}")
        fixed = to_fixed_array(query_vector, self.dim)
        with _storage_errors():
            held = self._index.current()
            if held is not None:
                answer = self._search_held(held, fixed, k)
                if answer is not None:
                    return answer
            with self._db.read() as conn:
                top = self._sync(conn).top_k(fixed, k)
                _, metadata = _hits_metadata(conn, top)
        return _hits(top, metadata)

    def _search_held(
        self, held: tuple[int, IndexView], fixed: Int64Array, k: int
    ) -> list[SearchHit] | None:
        """The answer from the rows and flags held, when the probe proves them the file's
        (module docstring); None otherwise, without a probe, or while another thread
        uses it (a search never waits for that)."""
        epoch, view = held
        count = view.fixed.shape[0]
        top = view.top_k(fixed, k)
        if not self._probe_lock.acquire(blocking=False):
            return None
        try:
            if self._probe is None:
                return None
            state = _state(self._probe)
            if state[:2] != (count, epoch):
                return None
            flags = self._flags.current(epoch, state[2], count)
            if flags is None:
                return None
            tagged = [hit for hit in top if flags[hit[0]]]
            if not tagged:
                return [SearchHit(rid, dist, None) for rid, dist in top]
            again, metadata = _hits_metadata(self._probe, tagged)
        except apsw.Error:
            # Translated only when raised: entering the translation costs a fair part
            # of a search that raises nothing.
            with translate_errors():
                raise
        finally:
            self._probe_lock.release()
        return _hits(top, metadata) if again == state else None

    def get_metadata(self, target_id: str) -> Any:
        """The metadata of ``rec:N`` / ``node:N``; None when unset, unknown or malformed."""
        target = parse_target(target_id)
        if target is None:
            return None
        kind, number = target
        table, column = ("vmp_records", "record_id") if kind == "rec" else ("vmp_nodes", "node_id")
        with _storage_errors(), self._db.read() as conn:
            rows = conn.execute(
                f"SELECT metadata FROM {table} WHERE {column} = ?", (number,)
            ).fetchall()
        return _loads(rows[0][0]) if rows else None

    def snapshot(self) -> bytes:
        """The snapshot bytes of the current state (see :mod:`ratatoskr.vmp.snapshot`)."""
        with _storage_errors(), self._db.read() as conn:
            state = self._read_state(conn)
        return encode_snapshot(state)

    def state_hash(self) -> str:
        """SHA-256 hex of the logical state; equal before a snapshot and after its restore."""
        with _storage_errors(), self._db.read() as conn:
            state = self._read_state(conn)
        return state_hash(state)

    def record_count(self) -> int:
        """How many records the store holds."""
        with _storage_errors(), self._db.read() as conn:
            return _counters(conn)[0]

    def health(self) -> dict[str, Any]:
        """The body of ``GET /health``."""
        return {"status": "ok", "dim": self.dim, "records": self.record_count()}

    # -- internals -----------------------------------------------------------

    def _sync(self, conn: apsw.Connection) -> IndexView:
        """Inside a read transaction: the index and the metadata flags brought to the
        file's state, loading what is missing; the view of every record."""
        next_record, _, epoch, version = _counters(conn)

        def load(start: int, stop: int) -> Int32Matrix:
            return self._load_rows(conn, start, stop)

        view = self._index.view(epoch, next_record, load)
        held = self._flags.covers(epoch, version)
        if held is None and self._flags.covers(epoch, version - 1) is not None:
            # One metadata update behind (another process's): read that one record.
            changed = _last_metadata_change(conn)
            if changed is not None:
                self._flags.step(epoch, version, *changed)
                held = self._flags.covers(epoch, version)
        if held is not None and held < next_record:  # records another process appended
            self._flags.extend(
                epoch,
                version,
                held,
                [
                    bool(row[0])
                    for row in conn.execute(
                        "SELECT metadata IS NOT NULL FROM vmp_records"
                        " WHERE record_id >= ? AND record_id < ? ORDER BY record_id",
                        (held, next_record),
                    )
                ],
            )
        elif held != next_record and self._flags.may_reload(next_record):
            # Another epoch, or several metadata updates of another process: every
            # flag anew (rate-limited, see MetadataFlags.may_reload; until then the
            # general route, which reads its hits' metadata, answers).
            self._flags.load(
                epoch,
                version,
                next_record,
                [
                    int(row[0])
                    for row in conn.execute(
                        "SELECT record_id FROM vmp_records WHERE metadata IS NOT NULL"
                    )
                ],
            )
        return view

    def _load_rows(self, conn: apsw.Connection, start: int, stop: int) -> Int32Matrix:
        rows = conn.execute(
            "SELECT vector FROM vmp_records WHERE record_id >= ? AND record_id < ?"
            " ORDER BY record_id",
            (start, stop),
        ).fetchall()
        blob = b"".join(bytes(row[0]) for row in rows)  # type: ignore[arg-type]
        return np.frombuffer(blob, dtype="<i4").astype(np.int32).reshape(-1, self.dim)

    def _read_state(self, conn: apsw.Connection) -> VmpState:
        next_record, next_node, _, _ = _counters(conn)
        records = [
            RecordRow(int(rid), bytes(vec), tags, meta)
            for rid, vec, tags, meta in conn.execute(
                "SELECT record_id, vector, tags, metadata FROM vmp_records ORDER BY record_id"
            )
        ]
        nodes = [
            NodeRow(int(nid), int(kind), None if rid is None else int(rid), meta)
            for nid, kind, rid, meta in conn.execute(
                "SELECT node_id, kind, record_id, metadata FROM vmp_nodes ORDER BY node_id"
            )
        ]
        edges = [
            EdgeRow(int(src), int(dst), int(kind))
            for src, dst, kind in conn.execute(
                "SELECT src, dst, kind FROM vmp_edges ORDER BY src, dst, kind"
            )
        ]
        return VmpState(self.dim, next_record, next_node, records, nodes, edges)


def _counters(conn: apsw.Connection) -> tuple[int, int, int, int]:
    """``next_record_id``, ``next_node_id``, ``epoch``, ``metadata_changes``."""
    row = conn.execute(
        "SELECT next_record_id, next_node_id, epoch, metadata_changes FROM vmp_state WHERE id = 0"
    ).fetchall()[0]
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])  # type: ignore[arg-type]


def _last_metadata_change(conn: apsw.Connection) -> tuple[int, bool] | None:
    """The record of the last metadata update (migration 2's trigger) and whether it
    has metadata now; None when no update was recorded."""
    rows = conn.execute(
        "SELECT s.metadata_changed_record, r.metadata IS NOT NULL FROM vmp_state AS s"
        " LEFT JOIN vmp_records AS r ON r.record_id = s.metadata_changed_record"
        " WHERE s.id = 0 AND s.metadata_changed_record IS NOT NULL"
    ).fetchall()
    if not rows:
        return None
    record_id, tagged = rows[0]
    return int(record_id), bool(tagged)  # type: ignore[arg-type]


def _state(conn: apsw.Connection) -> tuple[int, int, int]:
    """``next_record_id``, ``epoch``, ``metadata_changes``: what proves the held state."""
    for row in conn.execute(
        "SELECT next_record_id, epoch, metadata_changes FROM vmp_state WHERE id = 0"
    ):
        return int(row[0]), int(row[1]), int(row[2])
    raise InternalError("the store's counters are missing")


@functools.cache
def _search_sql(hits: int) -> str:
    """The counters (tag 0) and the metadata of ``hits`` records (tag 1), in one statement:
    one snapshot, one round through SQLite."""
    marks = ",".join("?" * hits)
    return (
        "SELECT 0, next_record_id, epoch, metadata_changes FROM vmp_state WHERE id = 0"
        " UNION ALL SELECT 1, record_id, metadata, NULL FROM vmp_records"
        f" WHERE record_id IN ({marks})"
    )


def _hits_metadata(
    conn: apsw.Connection, top: list[tuple[int, int]]
) -> tuple[tuple[int, int, int], dict[int, Any]]:
    """``(next_record_id, epoch, metadata_changes)`` and the non-null metadata of the
    ``top`` records."""
    state = (-1, -1, -1)
    metadata: dict[int, Any] = {}
    for tag, number, value, changes in conn.execute(_search_sql(len(top)), [rid for rid, _ in top]):
        if not tag:
            state = (int(number), int(value), int(changes))
        elif value is not None:
            metadata[int(number)] = codec.loads(str(value))
    return state, metadata


def _hits(top: list[tuple[int, int]], metadata: dict[int, Any]) -> list[SearchHit]:
    return [SearchHit(rid, dist, metadata.get(rid)) for rid, dist in top]


def _node_kind(conn: apsw.Connection, node_id: int) -> int | None:
    rows = conn.execute("SELECT kind FROM vmp_nodes WHERE node_id = ?", (node_id,)).fetchall()
    return int(rows[0][0]) if rows else None  # type: ignore[arg-type]


def _loads(text: object) -> Any:
    return None if text is None else codec.loads(str(text))


def _check_u32(value: object, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_U32:
        raise InvalidArgument(f"{name} must be an unsigned 32-bit integer")
    return value


def _tags_json(tags: object) -> str | None:
    if tags is None:
        return None
    if not isinstance(tags, list | tuple) or not all(isinstance(tag, str) for tag in tags):
        raise InvalidArgument("tags must be an array of strings")
    return _field_json(list(tags), "tags")


def _is_text(file: object) -> bool:
    return isinstance(file, io.TextIOBase)


def _field_json(value: Any, what: str) -> str | None:
    """The canonical text of a stored JSON field, at most MAX_JSON_BYTES of UTF-8.

    The bound is what lets a snapshot decoder read a field whole with bounded memory;
    over HTTP no field comes near it (request bodies are smaller).
    """
    if value is None:
        return None
    text = canonical_json(value)
    # A character is at most 4 bytes of UTF-8: most texts need no encoding to tell.
    if len(text) * 4 > MAX_JSON_BYTES and len(text.encode("utf-8")) > MAX_JSON_BYTES:
        raise InvalidArgument(f"{what} exceeds {MAX_JSON_BYTES} bytes as canonical JSON")
    return text


def open_vmp_store(
    db_path: str | os.PathLike[str],
    *,
    dim: int = DEFAULT_DIM,
    max_records: int = DEFAULT_MAX_RECORDS,
    options: ConnectionOptions | None = None,
) -> VmpStore:
    """Open (creating and migrating if needed) the VMP store at ``db_path`` (or ``":memory:"``).

    ``dim`` is fixed when the file is created. Raises ValueError for a dim outside
    1…4096 or max_records outside 1…2**31-1, and the ratatoskr.sqlite StorageError
    types (SchemaMismatch when the file was created with another dim).
    """
    if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= MAX_DIM:
        raise ValueError(f"dim must be an integer within 1…{MAX_DIM}")
    if (
        isinstance(max_records, bool)
        or not isinstance(max_records, int)
        or not 1 <= max_records <= MAX_RECORDS_LIMIT
    ):
        raise ValueError(f"max_records must be an integer within 1…{MAX_RECORDS_LIMIT}")
    db = Database(
        os.fspath(db_path),
        plane=PLANE,
        migrations=MIGRATIONS,
        meta={"dim": MetaSetting(str(dim), "RATATOSKR_VMP_DIM")},
        options=options,
    )
    try:
        return VmpStore(db, dim=dim, max_records=max_records)
    except BaseException:
        db.close()
        raise
