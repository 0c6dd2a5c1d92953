"""Reading a snapshot back, checking every part on the way.

Decoding reads a seekable binary file (``io.BytesIO`` for a blob in memory) front to
back through a small buffer, so what it holds is a batch of records and two bytes
per node, never the blob: a snapshot can be checked and restored straight from the
temporary file an upload was spooled to. Anything wrong is InvalidArgument.
"""

from __future__ import annotations

import hashlib
import io
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from ratatoskr.vmp.canonical import MAX_JSON_BYTES, dumps_checked, strict_loads
from ratatoskr.vmp.errors import InvalidArgument
from ratatoskr.vmp.fixedpoint import Q_MAX
from ratatoskr.vmp.schema import EDGE_PARENT_OF, NODE_CHUNK, NODE_DOCUMENT
from ratatoskr.vmp.snapshot import (
    COUNTS,
    EDGE,
    HEADER_SIZE,
    NODE_FIXED,
    NODE_HEAD,
    NONE_U32,
    RECORD_FIXED,
    TRAILER_SIZE,
    U32,
    EdgeRow,
    NodeRow,
    RecordRow,
    VmpState,
    declared_snapshot_size,
    length_mismatch,
    rejected,
)

_READ_CHUNK = 1 << 20
# Vectors are range-checked (and rows handed on) a batch at a time: this many records,
# or fewer when their fields pass _BATCH_BYTES, so a batch of large records stays small.
_RECORD_BATCH = 1024
_BATCH_BYTES = 1 << 20


@dataclass(frozen=True)
class SnapshotCounts:
    """What a snapshot's body begins with, and its checksum."""

    dim: int
    next_record_id: int
    next_node_id: int
    records: int
    nodes: int
    edges: int
    checksum: bytes


@dataclass(frozen=True)
class _Envelope:
    start: int  # file offset of the header
    body_length: int
    checksum: bytes


def _read_exactly(file: IO[bytes], size: int) -> bytes:
    data = file.read(size)
    while len(data) < size:
        more = file.read(size - len(data))
        if not more:
            # The size was checked against the header: the file shrank under us.
            raise rejected("body is truncated")
        data += more
    return data


def _open_envelope(file: IO[bytes]) -> _Envelope:
    """Header and trailer of the snapshot filling ``file`` from its position to its end."""
    start = file.tell()
    size = file.seek(0, os.SEEK_END) - start
    if size < HEADER_SIZE + TRAILER_SIZE:
        raise rejected("too short to be a snapshot")
    file.seek(start)
    if declared_snapshot_size(_read_exactly(file, HEADER_SIZE)) != size:
        raise length_mismatch()
    file.seek(start + size - TRAILER_SIZE)
    checksum = _read_exactly(file, TRAILER_SIZE)
    return _Envelope(start, size - HEADER_SIZE - TRAILER_SIZE, checksum)


def _verify_checksum(file: IO[bytes], envelope: _Envelope) -> None:
    """A first pass at C speed: a corrupt blob is refused before any parsing."""
    file.seek(envelope.start)
    digest = hashlib.sha256()
    left = HEADER_SIZE + envelope.body_length
    while left:
        piece = _read_exactly(file, min(left, _READ_CHUNK))
        digest.update(piece)
        left -= len(piece)
    if digest.digest() != envelope.checksum:
        raise rejected("checksum mismatch (corrupt)")


class _Reader:
    """Sequential reads of header + body through a small buffer, hashing every byte read."""

    def __init__(self, file: IO[bytes], envelope: _Envelope) -> None:
        file.seek(envelope.start)
        self._file = file
        self._left = HEADER_SIZE + envelope.body_length  # not yet read from the file
        self._buf = b""
        self._pos = 0
        self._digest = hashlib.sha256()

    def _fill(self, size: int) -> None:
        have = len(self._buf) - self._pos
        if size - have > self._left:
            raise rejected("body is truncated")
        want = min(self._left, max(size - have, _READ_CHUNK))
        data = _read_exactly(self._file, want)
        self._digest.update(data)
        self._left -= want
        self._buf = self._buf[self._pos :] + data if have else data
        self._pos = 0

    def take(self, size: int) -> bytes:
        if len(self._buf) - self._pos < size:
            self._fill(size)
        end = self._pos + size
        piece = self._buf[self._pos : end]
        self._pos = end
        return piece

    def unpack(self, fmt: struct.Struct) -> tuple[Any, ...]:
        if len(self._buf) - self._pos < fmt.size:
            self._fill(fmt.size)
        values = fmt.unpack_from(self._buf, self._pos)
        self._pos += fmt.size
        return values

    def json(self, what: str, *, check: bool) -> tuple[str | None, Any]:
        """A JSON field: its text (None for the null sentinel) and, when ``check``
        is set, its value after checking that the text is canonical JSON."""
        (size,) = self.unpack(U32)
        if size == NONE_U32:
            return None, None
        if size > MAX_JSON_BYTES:
            # Read whole, a field is what decoding holds; the store never keeps one larger.
            raise rejected(f"{what} is larger than a stored field can be")
        try:
            text = self.take(size).decode("utf-8")
            if not check:
                return text, None
            value = strict_loads(text)
        except (UnicodeDecodeError, InvalidArgument) as exc:
            raise rejected(f"{what} is not valid JSON") from exc
        # JSON null is only ever the length sentinel.
        if value is None or dumps_checked(value) != text:
            raise rejected(f"{what} is not canonical JSON")
        return text, value

    def at_end(self) -> bool:
        return self._left == 0 and self._pos == len(self._buf)

    def digest(self) -> bytes:
        return self._digest.digest()


RecordTuple = tuple[int, bytes, str | None, str | None]
NodeTuple = tuple[int, int, int | None, str | None]
EdgeTuple = tuple[int, int, int]


class SnapshotBody:
    """One pass over a snapshot's body, every check made on the way.

    Get one from :func:`open_snapshot`; iterate :meth:`records`, :meth:`nodes` and
    :meth:`edges` in that order, each to its end, then call :meth:`finish`. Rows
    are tuples in the column order of the store's tables. Anything wrong raises
    InvalidArgument from the iteration or from ``finish``; only a pass that got
    through ``finish`` has seen a valid snapshot.
    """

    def __init__(
        self, file: IO[bytes], envelope: _Envelope, dim: int, *, checked: bytes | None
    ) -> None:
        self._envelope = envelope
        self._dim = dim
        self._checked = checked
        self._reader = _Reader(file, envelope)
        self._reader.take(HEADER_SIZE)  # checked by the envelope; read to be hashed
        snap_dim, next_record, next_node, n_records, n_nodes, n_edges = self._reader.unpack(COUNTS)
        if snap_dim != dim:
            raise rejected(f"taken with dim {snap_dim}, this store has dim {dim}")
        if next_record != n_records or next_node != n_nodes:
            raise rejected("counters do not match the number of records and nodes")
        least = n_records * (RECORD_FIXED + 4 * dim) + n_nodes * NODE_FIXED
        if least + n_edges * EDGE.size > envelope.body_length - COUNTS.size:
            raise rejected("body is truncated")
        self.counts = SnapshotCounts(
            dim, next_record, next_node, n_records, n_nodes, n_edges, envelope.checksum
        )
        # One byte per node: its kind, then flags set by the edges (see ``edges``).
        self._kinds = bytearray()
        self._marks = bytearray()
        self._stage = 0

    def _enter(self, stage: int) -> None:
        # A section read before the one ahead of it was read to its end would mis-parse.
        if self._stage != stage:
            raise RuntimeError("read a snapshot's records, nodes and edges in order, each once")

    def records(self) -> Iterator[RecordTuple]:
        """The records, by record_id."""
        self._enter(0)
        reader, vector_size, check = self._reader, 4 * self._dim, self._checked is None
        batch: list[RecordTuple] = []
        batch_bytes = 0
        for expected_id in range(self.counts.records):
            (record_id,) = reader.unpack(U32)
            if record_id != expected_id:
                raise rejected("record ids are not 0, 1, 2, …")
            vector = reader.take(vector_size)
            tags, tag_list = reader.json("tags", check=check)
            if check and tags is not None and not _is_tag_list(tag_list):
                raise rejected("tags must be an array of strings")
            metadata = reader.json("metadata", check=check)[0]
            batch.append((record_id, vector, tags, metadata))
            batch_bytes += vector_size + len(tags or "") + len(metadata or "")
            if len(batch) == _RECORD_BATCH or batch_bytes >= _BATCH_BYTES:
                _check_range(batch)
                yield from batch
                batch.clear()
                batch_bytes = 0
        _check_range(batch)
        yield from batch
        self._stage = 1

    def nodes(self) -> Iterator[NodeTuple]:
        """The nodes, by node_id."""
        self._enter(1)
        reader, kinds, check = self._reader, self._kinds, self._checked is None
        chunk_record = 0
        for expected_id in range(self.counts.nodes):
            node_id, kind, record_ref = reader.unpack(NODE_HEAD)
            if node_id != expected_id:
                raise rejected("node ids are not 0, 1, 2, …")
            if kind not in (NODE_DOCUMENT, NODE_CHUNK):
                raise rejected("unknown node kind")
            chunk_of = None if record_ref == NONE_U32 else record_ref
            if (kind == NODE_CHUNK) != (chunk_of is not None):
                raise rejected("chunk nodes and only chunk nodes name a record")
            if kind == NODE_CHUNK:
                # Each upsert adds record r and its chunk node together, in order.
                if chunk_of != chunk_record:
                    raise rejected("chunk nodes do not follow the record order")
                chunk_record += 1
            kinds.append(kind)
            yield (node_id, kind, chunk_of, reader.json("node metadata", check=check)[0])
        if chunk_record != self.counts.records:
            raise rejected("every record needs exactly one chunk node")
        self._stage = 2

    def edges(self) -> Iterator[EdgeTuple]:
        """The edges, by (src, dst, kind)."""
        self._enter(2)
        reader, kinds = self._reader, self._kinds
        marks = self._marks = bytearray(len(kinds))
        previous: tuple[int, int, int] | None = None
        for _ in range(self.counts.edges):
            key: tuple[int, int, int] = reader.unpack(EDGE)
            if previous is not None and key <= previous:
                raise rejected("edges are not in canonical order")
            previous = key
            src, dst, kind = key
            if kind != EDGE_PARENT_OF:
                raise rejected("unknown edge kind")
            if not (src < dst < len(kinds)):
                raise rejected("an edge must run from a document to a later chunk")
            if kinds[src] != NODE_DOCUMENT or kinds[dst] != NODE_CHUNK:
                raise rejected("an edge must run from a document to a chunk")
            if marks[dst] & _HAS_PARENT:
                raise rejected("a chunk belongs to more than one document")
            marks[dst] |= _HAS_PARENT
            marks[src] |= _HAS_CHILD
            yield key
        self._stage = 3

    def finish(self) -> None:
        """The checks that need the whole body: no trailing bytes, the checksum of what
        this pass read, a parent for every chunk and a chunk for every document."""
        self._enter(3)
        self._stage = 4
        if not self._reader.at_end():
            raise rejected("trailing bytes after the edges")
        digest = self._reader.digest()
        if digest != self._envelope.checksum or self._checked not in (None, digest):
            raise rejected("checksum mismatch (corrupt)")
        kinds = np.frombuffer(self._kinds, dtype=np.uint8)
        marks = np.frombuffer(self._marks, dtype=np.uint8)
        if np.any((kinds == NODE_CHUNK) & (marks & _HAS_PARENT == 0)):
            raise rejected("a chunk belongs to no document")
        if np.any((kinds == NODE_DOCUMENT) & (marks & _HAS_CHILD == 0)):
            raise rejected("a document has no chunk")


_HAS_PARENT = 1
_HAS_CHILD = 2


def _is_tag_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(tag, str) for tag in value)


def _check_range(batch: list[RecordTuple]) -> None:
    if batch:
        values = np.frombuffer(b"".join(row[1] for row in batch), dtype="<i4")
        if int(values.max()) > Q_MAX:
            raise rejected("a vector value lies outside the Q16.16 range of VMP")


def open_snapshot(
    file: IO[bytes], *, dim: int, verify_checksum: bool = True, checked: bytes | None = None
) -> SnapshotBody:
    """A checking pass over the snapshot filling ``file`` (seekable, binary) from its
    current position to its end.

    Header, size and (unless ``verify_checksum`` is False) the checksum are
    checked at once; the body as it is read (see :class:`SnapshotBody`, whose
    ``finish`` checks the checksum of what it read in any case). ``checked`` is
    the checksum of a snapshot :func:`check_snapshot` passed: the JSON texts are
    then not parsed again, since ``finish`` refuses unless what this pass read
    has that very checksum (it is the same bytes). Raises InvalidArgument when
    the snapshot is truncated, corrupt, of another format, version or dimension.
    """
    envelope = _open_envelope(file)
    if verify_checksum:
        _verify_checksum(file, envelope)
    return SnapshotBody(file, envelope, dim, checked=checked)


def check_snapshot(file: IO[bytes], *, dim: int) -> SnapshotCounts:
    """Check every part of the snapshot in ``file`` (as :func:`open_snapshot` reads it)
    without keeping its rows; returns its counts and checksum. Raises InvalidArgument."""
    body = open_snapshot(file, dim=dim)
    for _ in body.records():
        pass
    for _ in body.nodes():
        pass
    for _ in body.edges():
        pass
    body.finish()
    return body.counts


def decode_snapshot(blob: bytes, *, dim: int) -> VmpState:
    """Check every part of ``blob`` and return the state it holds.

    Raises InvalidArgument when the blob is truncated, corrupt (checksum), of
    another format or version, taken with another dimension, or internally
    inconsistent (ids, counters, graph). Nothing is changed by decoding.
    """
    body = open_snapshot(io.BytesIO(blob), dim=dim)
    records = [RecordRow(*row) for row in body.records()]
    nodes = [NodeRow(*row) for row in body.nodes()]
    edges = [EdgeRow(*row) for row in body.edges()]
    body.finish()
    counts = body.counts
    return VmpState(dim, counts.next_record_id, counts.next_node_id, records, nodes, edges)
