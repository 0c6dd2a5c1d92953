"""The snapshot format and the state hash: one canonical byte encoding of the logical state.

Layout (all integers little-endian; the package README is the full spec)::

    header   magic  b"RTKVMPS\\x00" (8) | version u16 = 1 | flags u16 = 0 | body_length u64
    body     dim u32 | next_record_id u32 | next_node_id u32
             | record_count u32 | node_count u32 | edge_count u32
             | records (by record_id): record_id u32, dim × i32 Q16.16, tags json, metadata json
             | nodes   (by node_id):   node_id u32, kind u8, record_id u32 (0xFFFFFFFF: none),
                                       metadata json
             | edges   (by src, dst, kind): src u32, dst u32, kind u8
             json = u32 byte length (0xFFFFFFFF: null) + canonical UTF-8 JSON text
    trailer  SHA-256 of header + body (32)

The body depends only on the logical state (no time, no file layout), so the
same operations give the same bytes anywhere. The state hash is SHA-256 of
the body: equal before a snapshot and after its restore.

Decoding reads a seekable binary file (``io.BytesIO`` for a blob in memory)
front to back through a small buffer, checking as it goes, so what it holds is
a batch of records and two bytes per node, never the blob: a snapshot can be
checked and restored straight from the temporary file an upload was spooled to.
"""

from __future__ import annotations

import hashlib
import io
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from ratatoskr.vmp.canonical import MAX_JSON_BYTES, dumps_checked, strict_loads
from ratatoskr.vmp.errors import InvalidArgument
from ratatoskr.vmp.fixedpoint import Q_MAX
from ratatoskr.vmp.schema import EDGE_PARENT_OF, NODE_CHUNK, NODE_DOCUMENT

MAGIC = b"RTKVMPS\x00"
FORMAT_VERSION = 1
NONE_U32 = 0xFFFFFFFF

_HEADER = struct.Struct("<8sHHQ")
_COUNTS = struct.Struct("<6I")
_U32 = struct.Struct("<I")
_NODE_HEAD = struct.Struct("<IBI")
_EDGE = struct.Struct("<IIB")
HEADER_SIZE = _HEADER.size
TRAILER_SIZE = 32
# A record in the worst case: its id, vector and two JSON lengths; its chunk node; a
# document node of its own (every document has a chunk, so there are at most as many
# documents as records); and the edge between the two nodes.
_RECORD_FIXED = 3 * _U32.size
_NODE_FIXED = _NODE_HEAD.size + _U32.size
_PER_RECORD_FIXED = _RECORD_FIXED + 2 * _NODE_FIXED + _EDGE.size
DEFAULT_JSON_BYTES_PER_RECORD = 2048
_READ_CHUNK = 1 << 20
# Vectors are range-checked (and rows handed on) a batch at a time: this many records,
# or fewer when their fields pass _BATCH_BYTES, so a batch of large records stays small.
_RECORD_BATCH = 1024
_BATCH_BYTES = 1 << 20


@dataclass(frozen=True)
class RecordRow:
    record_id: int
    vector: bytes  # dim × little-endian int32
    tags: str | None  # canonical JSON text
    metadata: str | None


@dataclass(frozen=True)
class NodeRow:
    node_id: int
    kind: int
    record_id: int | None
    metadata: str | None


@dataclass(frozen=True)
class EdgeRow:
    src: int
    dst: int
    kind: int


@dataclass(frozen=True)
class VmpState:
    """The whole logical state of a store."""

    dim: int
    next_record_id: int
    next_node_id: int
    records: Sequence[RecordRow]
    nodes: Sequence[NodeRow]
    edges: Sequence[EdgeRow]


def _json_field(text: str | None) -> bytes:
    if text is None:
        return _U32.pack(NONE_U32)
    raw = text.encode("utf-8")
    return _U32.pack(len(raw)) + raw


def iter_body(state: VmpState) -> Iterator[bytes]:
    """The canonical body encoding of ``state``, in pieces."""
    yield _COUNTS.pack(
        state.dim,
        state.next_record_id,
        state.next_node_id,
        len(state.records),
        len(state.nodes),
        len(state.edges),
    )
    for rec in state.records:
        yield _U32.pack(rec.record_id)
        yield rec.vector
        yield _json_field(rec.tags)
        yield _json_field(rec.metadata)
    for node in state.nodes:
        yield _NODE_HEAD.pack(
            node.node_id, node.kind, NONE_U32 if node.record_id is None else node.record_id
        )
        yield _json_field(node.metadata)
    for edge in state.edges:
        yield _EDGE.pack(edge.src, edge.dst, edge.kind)


def state_hash(state: VmpState) -> str:
    """SHA-256 (hex) of the canonical body of ``state``."""
    digest = hashlib.sha256()
    for piece in iter_body(state):
        digest.update(piece)
    return digest.hexdigest()


def snapshot_size_limit(
    max_records: int, dim: int, *, json_bytes_per_record: int = DEFAULT_JSON_BYTES_PER_RECORD
) -> int:
    """The default cap on a snapshot upload for a store of ``max_records`` and ``dim``.

    The format fixes every byte but the JSON texts: 76 bytes of header, counts
    and trailer, and per record at most ``47 + 4·dim`` bytes — the record (id,
    vector, the two JSON lengths: 12 + 4·dim), its chunk node (13), a document
    node of its own (13; a document always has a chunk, so there are never more
    documents than records) and their edge (9). The JSON texts (tags, record
    and node metadata) are not bounded by the format, and the only bound the
    store keeps, 16 MiB per field, would make a cap in petabytes; so the
    limit allows an *average* of ``json_bytes_per_record`` (2 KiB: a 512-
    character chunk of text in any script plus a few keys) over a store full
    to ``max_records``. A store holding fewer records has that much more room
    per record; a deployment whose metadata is heavier sets the cap itself.

        limit = 76 + max_records · (47 + 4·dim + json_bytes_per_record)

    For the defaults (1,000,000 records, dim 16): 2,159,000,076 bytes (2.01 GiB).
    Raises ValueError for a negative argument.
    """
    if min(max_records, dim, json_bytes_per_record) < 0:
        raise ValueError("snapshot size limit arguments must not be negative")
    per_record = _PER_RECORD_FIXED + 4 * dim + json_bytes_per_record
    return HEADER_SIZE + _COUNTS.size + TRAILER_SIZE + max_records * per_record


def encode_snapshot(state: VmpState) -> bytes:
    """The snapshot bytes of ``state``: header, canonical body, SHA-256 trailer."""
    body = b"".join(iter_body(state))
    head = _HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(body))
    return head + body + hashlib.sha256(head + body).digest()


def _bad(reason: str) -> InvalidArgument:
    return InvalidArgument(f"snapshot rejected: {reason}")


def length_mismatch() -> InvalidArgument:
    """The refusal of a snapshot whose size is not the one its header declares."""
    return _bad("length does not match its header (truncated or padded)")


def declared_snapshot_size(head: bytes) -> int:
    """The total size (header + body + trailer) the snapshot beginning with ``head`` declares.

    ``head`` is at least its first HEADER_SIZE bytes: enough to refuse a foreign
    upload, or one announcing more than a cap, before the rest arrives. Raises
    InvalidArgument (too short, not a ratatoskr VMP snapshot, another version,
    unknown flags).
    """
    if len(head) < HEADER_SIZE:
        raise _bad("too short to be a snapshot")
    magic, version, flags, body_length = _HEADER.unpack_from(head)
    if magic != MAGIC:
        raise _bad("not a ratatoskr VMP snapshot")
    if version != FORMAT_VERSION:
        raise _bad(f"format version {version} is not supported (expected {FORMAT_VERSION})")
    if flags != 0:
        raise _bad("unknown flags set")
    return HEADER_SIZE + int(body_length) + TRAILER_SIZE


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
            raise _bad("body is truncated")
        data += more
    return data


def _open_envelope(file: IO[bytes]) -> _Envelope:
    """Header and trailer of the snapshot filling ``file`` from its position to its end."""
    start = file.tell()
    size = file.seek(0, os.SEEK_END) - start
    if size < HEADER_SIZE + TRAILER_SIZE:
        raise _bad("too short to be a snapshot")
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
        raise _bad("checksum mismatch (corrupt)")


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
            raise _bad("body is truncated")
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
        (size,) = self.unpack(_U32)
        if size == NONE_U32:
            return None, None
        if size > MAX_JSON_BYTES:
            # Read whole, a field is what decoding holds; the store never keeps one larger.
            raise _bad(f"{what} is larger than a stored field can be")
        try:
            text = self.take(size).decode("utf-8")
            if not check:
                return text, None
            value = strict_loads(text)
        except (UnicodeDecodeError, InvalidArgument) as exc:
            raise _bad(f"{what} is not valid JSON") from exc
        # JSON null is only ever the length sentinel.
        if value is None or dumps_checked(value) != text:
            raise _bad(f"{what} is not canonical JSON")
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
        snap_dim, next_record, next_node, n_records, n_nodes, n_edges = self._reader.unpack(_COUNTS)
        if snap_dim != dim:
            raise _bad(f"taken with dim {snap_dim}, this store has dim {dim}")
        if next_record != n_records or next_node != n_nodes:
            raise _bad("counters do not match the number of records and nodes")
        least = n_records * (_RECORD_FIXED + 4 * dim) + n_nodes * _NODE_FIXED
        if least + n_edges * _EDGE.size > envelope.body_length - _COUNTS.size:
            raise _bad("body is truncated")
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
            (record_id,) = reader.unpack(_U32)
            if record_id != expected_id:
                raise _bad("record ids are not 0, 1, 2, …")
            vector = reader.take(vector_size)
            tags, tag_list = reader.json("tags", check=check)
            if check and tags is not None and not _is_tag_list(tag_list):
                raise _bad("tags must be an array of strings")
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
            node_id, kind, record_ref = reader.unpack(_NODE_HEAD)
            if node_id != expected_id:
                raise _bad("node ids are not 0, 1, 2, …")
            if kind not in (NODE_DOCUMENT, NODE_CHUNK):
                raise _bad("unknown node kind")
            chunk_of = None if record_ref == NONE_U32 else record_ref
            if (kind == NODE_CHUNK) != (chunk_of is not None):
                raise _bad("chunk nodes and only chunk nodes name a record")
            if kind == NODE_CHUNK:
                # Each upsert adds record r and its chunk node together, in order.
                if chunk_of != chunk_record:
                    raise _bad("chunk nodes do not follow the record order")
                chunk_record += 1
            kinds.append(kind)
            yield (node_id, kind, chunk_of, reader.json("node metadata", check=check)[0])
        if chunk_record != self.counts.records:
            raise _bad("every record needs exactly one chunk node")
        self._stage = 2

    def edges(self) -> Iterator[EdgeTuple]:
        """The edges, by (src, dst, kind)."""
        self._enter(2)
        reader, kinds = self._reader, self._kinds
        marks = self._marks = bytearray(len(kinds))
        previous: tuple[int, int, int] | None = None
        for _ in range(self.counts.edges):
            key: tuple[int, int, int] = reader.unpack(_EDGE)
            if previous is not None and key <= previous:
                raise _bad("edges are not in canonical order")
            previous = key
            src, dst, kind = key
            if kind != EDGE_PARENT_OF:
                raise _bad("unknown edge kind")
            if not (src < dst < len(kinds)):
                raise _bad("an edge must run from a document to a later chunk")
            if kinds[src] != NODE_DOCUMENT or kinds[dst] != NODE_CHUNK:
                raise _bad("an edge must run from a document to a chunk")
            if marks[dst] & _HAS_PARENT:
                raise _bad("a chunk belongs to more than one document")
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
            raise _bad("trailing bytes after the edges")
        digest = self._reader.digest()
        if digest != self._envelope.checksum or self._checked not in (None, digest):
            raise _bad("checksum mismatch (corrupt)")
        kinds = np.frombuffer(self._kinds, dtype=np.uint8)
        marks = np.frombuffer(self._marks, dtype=np.uint8)
        if np.any((kinds == NODE_CHUNK) & (marks & _HAS_PARENT == 0)):
            raise _bad("a chunk belongs to no document")
        if np.any((kinds == NODE_DOCUMENT) & (marks & _HAS_CHILD == 0)):
            raise _bad("a document has no chunk")


_HAS_PARENT = 1
_HAS_CHILD = 2


def _is_tag_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(tag, str) for tag in value)


def _check_range(batch: list[RecordTuple]) -> None:
    if batch:
        values = np.frombuffer(b"".join(row[1] for row in batch), dtype="<i4")
        if int(values.max()) > Q_MAX:
            raise _bad("a vector value lies outside the Q16.16 range of VMP")


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
