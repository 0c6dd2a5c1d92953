"""The VMP store: records, document/chunk nodes, edges and metadata in SQLite.

Every write is one ``BEGIN IMMEDIATE`` transaction of the shared
:class:`ratatoskr.sqlite.Database` (record + nodes + edge + metadata + counters,
all or nothing). Searches answer from an in-memory copy of the vectors and of
which records have metadata, kept in step with the file: a write appends its
row after commit, and a search proves what it holds the file's before it
answers (:mod:`ratatoskr.vmp.search`), loading what another process wrote or a
restore replaced (:mod:`ratatoskr.vmp.sync`).
"""

from __future__ import annotations

import dataclasses
import io
import os
import threading
from collections.abc import Sequence
from typing import IO, Any, Unpack

import apsw
import numpy as np

from ratatoskr.sqlite import ConnectionOptions, Database, MetaSetting, connect, translate_errors
from ratatoskr.vmp.errors import CapacityExceeded, InvalidArgument, NotFound
from ratatoskr.vmp.fields import (
    MAX_U32,
    check_u32,
    field_json,
    parse_target,
    tags_json,
    target_table,
)
from ratatoskr.vmp.fixedpoint import MAX_DIM, to_fixed_array, to_fixed_vector
from ratatoskr.vmp.index import ExactIndex, IndexView, Int64Array
from ratatoskr.vmp.interface import ClosesOnExit, UpsertOptions, upsert_fields
from ratatoskr.vmp.queries import counters, node_kind, read_state, stored_metadata
from ratatoskr.vmp.restore import SnapshotSource, replace_state, snapshot_file
from ratatoskr.vmp.results import SearchHit, UpsertResult, search_hits
from ratatoskr.vmp.schema import EDGE_PARENT_OF, MIGRATIONS, NODE_CHUNK, NODE_DOCUMENT, PLANE
from ratatoskr.vmp.search import general_search, held_metadata
from ratatoskr.vmp.snapshot import encode_snapshot, state_hash
from ratatoskr.vmp.storage_errors import storage_errors
from ratatoskr.vmp.sync import sync_held
from ratatoskr.vmp.tagged import MetadataFlags

__all__ = [
    "DEFAULT_DIM",
    "DEFAULT_MAX_RECORDS",
    "MAX_K",
    "MAX_RECORDS_LIMIT",
    "SearchHit",
    "UpsertResult",
    "VmpStore",
    "open_vmp_store",
]

MAX_K = 1000
# Nodes are u32 and an upsert may add two of them, so records stay below 2**31.
MAX_RECORDS_LIMIT = 2**31 - 1
DEFAULT_DIM = 16
DEFAULT_MAX_RECORDS = 1_000_000


class VmpStore(ClosesOnExit):
    """One VMP memory. Thread-safe; use :func:`open_vmp_store` to get one."""

    def __init__(self, db: Database, *, dim: int, max_records: int) -> None:
        self._db = db
        self.dim = dim
        self.max_records = max_records
        self._index = ExactIndex(dim)
        self._flags = MetadataFlags()
        # The probe (ratatoskr.vmp.search) and the lock that keeps it to one thread at a
        # time; a database in memory has one connection, so no probe.
        self._probe_lock = threading.Lock()
        self._probe: apsw.Connection | None = None
        with storage_errors():
            if not db.is_memory:
                self._probe = connect(db.path, dataclasses.replace(db.options, readonly=True))
            try:
                with self._db.read() as conn:
                    # Load the vectors now rather than on the first search.
                    sync_held(conn, self._index, self._flags)
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
        document = check_u32(attach_to_document_node, "attach_to_document_node")
        tags_text = tags_json(tags)
        metadata_text = field_json(metadata, "metadata")
        blob = np.asarray(fixed, dtype="<i4").tobytes()
        with storage_errors(), self._db.write() as conn:
            next_record, next_node, epoch, version = counters(conn)
            if next_record >= self.max_records:
                raise CapacityExceeded(f"the store holds its maximum of {self.max_records} records")
            if document is None:
                document, chunk, new_next_node = next_node, next_node + 1, next_node + 2
            else:
                if node_kind(conn, document) != NODE_DOCUMENT:
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
                (next_record, blob, tags_text, metadata_text),
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
        self._flags.inserted(epoch, version, next_record, metadata_text is not None)
        return UpsertResult(next_record, document, chunk)

    def set_metadata(self, target_id: str, metadata: Any) -> None:
        """Replace the metadata of ``rec:N`` or ``node:N`` (None clears it).

        Raises InvalidArgument (malformed target or metadata), NotFound (no such record/node).
        """
        target = parse_target(target_id)
        if target is None:
            raise InvalidArgument('target_id must be "rec:<id>" or "node:<id>"')
        text = field_json(metadata, "metadata")
        kind, number = target
        table, column = target_table(kind)
        with storage_errors(), self._db.write() as conn:
            _, _, epoch, before = counters(conn)
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

    def restore_from_file(self, file: SnapshotSource) -> None:
        """Replace the whole state by the snapshot in ``file``, atomically.

        ``file`` is a path or a seekable binary file, read from its current position
        to its end, with memory bounded by a batch of records' fields (plus two bytes
        per node), whatever the snapshot's size (:mod:`ratatoskr.vmp.restore`); a
        file changed between the passes is refused. Raises InvalidArgument (corrupt,
        truncated, foreign, other dim, unreadable file), CapacityExceeded (more than
        ``max_records`` records, or a full disk); on any error the current state is
        untouched.
        """
        with snapshot_file(file) as opened:
            self._restore(opened)

    def _restore(self, file: IO[bytes]) -> None:
        replace_state(self._db, file, dim=self.dim, max_records=self.max_records)
        self._index.invalidate()
        self._flags.forget()

    # -- reads ----------------------------------------------------------------

    def search_vector(self, query_vector: Sequence[float], k: int) -> list[SearchHit]:
        """The ``k`` nearest records by exact squared L2, ascending, ties by lower record_id.

        Raises InvalidArgument (k not an integer in 1…1000, bad values), DimMismatch.
        """
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise InvalidArgument(f"k must be an integer within 1…{MAX_K}")
        fixed = to_fixed_array(query_vector, self.dim)
        with storage_errors():
            held = self._index.current()
            if held is not None:
                answer = self._search_held(held, fixed, k)
                if answer is not None:
                    return answer
            with self._db.read() as conn:
                return general_search(conn, self._index, self._flags, fixed, k)

    def _search_held(
        self, held: tuple[int, IndexView], fixed: Int64Array, k: int
    ) -> list[SearchHit] | None:
        """The answer from the rows and flags held, when the probe proves them the file's
        (:func:`ratatoskr.vmp.search.held_metadata`); None otherwise, without a probe,
        or while another thread uses it (a search never waits for that)."""
        epoch, view = held
        top = view.top_k(fixed, k)
        if not self._probe_lock.acquire(blocking=False):
            return None
        try:
            if self._probe is None:
                return None
            metadata = held_metadata(self._probe, self._flags, epoch, view.fixed.shape[0], top)
        except apsw.Error:
            # Translated only when raised: entering the translation costs a fair part
            # of a search that raises nothing.
            with translate_errors():
                raise
        finally:
            self._probe_lock.release()
        return None if metadata is None else search_hits(top, metadata)

    def get_metadata(self, target_id: str) -> Any:
        """The metadata of ``rec:N`` / ``node:N``; None when unset, unknown or malformed."""
        target = parse_target(target_id)
        if target is None:
            return None
        kind, number = target
        with storage_errors(), self._db.read() as conn:
            return stored_metadata(conn, *target_table(kind), number)

    def snapshot(self) -> bytes:
        """The snapshot bytes of the current state (see :mod:`ratatoskr.vmp.snapshot`)."""
        with storage_errors(), self._db.read() as conn:
            state = read_state(conn, self.dim)
        return encode_snapshot(state)

    def state_hash(self) -> str:
        """SHA-256 hex of the logical state; equal before a snapshot and after its restore."""
        with storage_errors(), self._db.read() as conn:
            state = read_state(conn, self.dim)
        return state_hash(state)

    def record_count(self) -> int:
        """How many records the store holds."""
        with storage_errors(), self._db.read() as conn:
            return counters(conn)[0]

    def health(self) -> dict[str, Any]:
        """The body of ``GET /health``."""
        return {"status": "ok", "dim": self.dim, "records": self.record_count()}


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
