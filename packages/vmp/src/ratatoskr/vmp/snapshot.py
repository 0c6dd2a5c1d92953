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
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from ratatoskr.vmp.canonical import canonical_json, strict_loads
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
_CHECKSUM_SIZE = 32


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


def encode_snapshot(state: VmpState) -> bytes:
    """The snapshot bytes of ``state``: header, canonical body, SHA-256 trailer."""
    body = b"".join(iter_body(state))
    head = _HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(body))
    return head + body + hashlib.sha256(head + body).digest()


class _Reader:
    def __init__(self, data: memoryview) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> memoryview:
        end = self.pos + size
        if end > len(self.data):
            raise _bad("body is truncated")
        piece = self.data[self.pos : end]
        self.pos = end
        return piece

    def unpack(self, fmt: struct.Struct) -> tuple[int, ...]:
        return fmt.unpack(self.take(fmt.size))

    def json(self, what: str) -> str | None:
        (size,) = self.unpack(_U32)
        if size == NONE_U32:
            return None
        try:
            text = bytes(self.take(size)).decode("utf-8")
            value = strict_loads(text)
        except (UnicodeDecodeError, InvalidArgument) as exc:
            raise _bad(f"{what} is not valid JSON") from exc
        if value is None or canonical_json(value) != text:
            raise _bad(f"{what} is not canonical JSON")
        return text


def _bad(reason: str) -> InvalidArgument:
    return InvalidArgument(f"snapshot rejected: {reason}")


def decode_snapshot(blob: bytes, *, dim: int) -> VmpState:
    """Check every part of ``blob`` and return the state it holds.

    Raises InvalidArgument when the blob is truncated, corrupt (checksum), of
    another format or version, taken with another dimension, or internally
    inconsistent (ids, counters, graph). Nothing is changed by decoding.
    """
    data = memoryview(blob)
    if len(data) < _HEADER.size + _CHECKSUM_SIZE:
        raise _bad("too short to be a snapshot")
    magic, version, flags, body_length = _HEADER.unpack(data[: _HEADER.size])
    if magic != MAGIC:
        raise _bad("not a ratatoskr VMP snapshot")
    if version != FORMAT_VERSION:
        raise _bad(f"format version {version} is not supported (expected {FORMAT_VERSION})")
    if flags != 0:
        raise _bad("unknown flags set")
    if body_length != len(data) - _HEADER.size - _CHECKSUM_SIZE:
        raise _bad("length does not match its header (truncated or padded)")
    content = data[: len(data) - _CHECKSUM_SIZE]
    if hashlib.sha256(content).digest() != bytes(data[len(data) - _CHECKSUM_SIZE :]):
        raise _bad("checksum mismatch (corrupt)")
    state = _parse_body(_Reader(content[_HEADER.size :]), dim)
    _check_graph(state)
    return state


def _parse_body(reader: _Reader, dim: int) -> VmpState:
    snap_dim, next_record, next_node, n_records, n_nodes, n_edges = reader.unpack(_COUNTS)
    if snap_dim != dim:
        raise _bad(f"taken with dim {snap_dim}, this store has dim {dim}")
    if next_record != n_records or next_node != n_nodes:
        raise _bad("counters do not match the number of records and nodes")
    vector_size = 4 * dim
    records: list[RecordRow] = []
    for expected_id in range(n_records):
        (record_id,) = reader.unpack(_U32)
        if record_id != expected_id:
            raise _bad("record ids are not 0, 1, 2, …")
        vector = bytes(reader.take(vector_size))
        tags = reader.json("tags")
        if tags is not None and not _is_tag_list(tags):
            raise _bad("tags must be an array of strings")
        records.append(RecordRow(record_id, vector, tags, reader.json("metadata")))
    if records:
        values = np.frombuffer(b"".join(r.vector for r in records), dtype="<i4")
        if int(values.max()) > Q_MAX:
            raise _bad("a vector value lies outside the Q16.16 range of VMP")
    nodes: list[NodeRow] = []
    for expected_id in range(n_nodes):
        node_id, kind, record_ref = reader.unpack(_NODE_HEAD)
        if node_id != expected_id:
            raise _bad("node ids are not 0, 1, 2, …")
        if kind not in (NODE_DOCUMENT, NODE_CHUNK):
            raise _bad("unknown node kind")
        chunk_of = None if record_ref == NONE_U32 else record_ref
        if (kind == NODE_CHUNK) != (chunk_of is not None):
            raise _bad("chunk nodes and only chunk nodes name a record")
        nodes.append(NodeRow(node_id, kind, chunk_of, reader.json("node metadata")))
    edges = [EdgeRow(*reader.unpack(_EDGE)) for _ in range(n_edges)]
    if reader.pos != len(reader.data):
        raise _bad("trailing bytes after the edges")
    return VmpState(dim, next_record, next_node, records, nodes, edges)


def _is_tag_list(text: str) -> bool:
    value = strict_loads(text)
    return isinstance(value, list) and all(isinstance(tag, str) for tag in value)


def _check_graph(state: VmpState) -> None:
    """The invariants every sequence of upserts keeps (see the README)."""
    chunk_record = 0
    for node in state.nodes:
        if node.kind == NODE_CHUNK:
            # Each upsert adds record r and its chunk node together, in order.
            if node.record_id != chunk_record:
                raise _bad("chunk nodes do not follow the record order")
            chunk_record += 1
    if chunk_record != len(state.records):
        raise _bad("every record needs exactly one chunk node")
    parent: dict[int, int] = {}
    children: dict[int, int] = {}
    previous: tuple[int, int, int] | None = None
    for edge in state.edges:
        key = (edge.src, edge.dst, edge.kind)
        if previous is not None and key <= previous:
            raise _bad("edges are not in canonical order")
        previous = key
        if edge.kind != EDGE_PARENT_OF:
            raise _bad("unknown edge kind")
        if not (edge.src < edge.dst < len(state.nodes)):
            raise _bad("an edge must run from a document to a later chunk")
        if state.nodes[edge.src].kind != NODE_DOCUMENT or state.nodes[edge.dst].kind != NODE_CHUNK:
            raise _bad("an edge must run from a document to a chunk")
        if edge.dst in parent:
            raise _bad("a chunk belongs to more than one document")
        parent[edge.dst] = edge.src
        children[edge.src] = children.get(edge.src, 0) + 1
    for node in state.nodes:
        if node.kind == NODE_CHUNK and node.node_id not in parent:
            raise _bad("a chunk belongs to no document")
        if node.kind == NODE_DOCUMENT and node.node_id not in children:
            raise _bad("a document has no chunk")
