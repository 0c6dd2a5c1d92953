"""The snapshot format: its layout, its rows, and the canonical encoding of a state.

The body depends only on the logical state (no time, no file layout), so the same
operations give the same bytes anywhere; the state hash is SHA-256 of the body, equal
before a snapshot and after its restore. The package README is the full spec; the
checking decoder is :mod:`ratatoskr.vmp.snapshot_reader`.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ratatoskr.vmp.errors import InvalidArgument

# Layout (all integers little-endian):
#
#   header   magic b"RTKVMPS\x00" (8) | version u16 = 1 | flags u16 = 0 | body_length u64
#   body     dim u32 | next_record_id u32 | next_node_id u32
#            | record_count u32 | node_count u32 | edge_count u32
#            | records (by record_id): record_id u32, dim x i32 Q16.16, tags json, metadata json
#            | nodes   (by node_id):   node_id u32, kind u8, record_id u32 (0xFFFFFFFF: none),
#                                      metadata json
#            | edges   (by src, dst, kind): src u32, dst u32, kind u8
#            json = u32 byte length (0xFFFFFFFF: null) + canonical UTF-8 JSON text
#   trailer  SHA-256 of header + body (32)
MAGIC = b"RTKVMPS\x00"
FORMAT_VERSION = 1
NONE_U32 = 0xFFFFFFFF

HEADER = struct.Struct("<8sHHQ")
COUNTS = struct.Struct("<6I")
U32 = struct.Struct("<I")
NODE_HEAD = struct.Struct("<IBI")
EDGE = struct.Struct("<IIB")
HEADER_SIZE = HEADER.size
TRAILER_SIZE = 32
# A record in the worst case: its id, vector and two JSON lengths; its chunk node; a
# document node of its own (every document has a chunk, so there are at most as many
# documents as records); and the edge between the two nodes.
RECORD_FIXED = 3 * U32.size
NODE_FIXED = NODE_HEAD.size + U32.size
_PER_RECORD_FIXED = RECORD_FIXED + 2 * NODE_FIXED + EDGE.size
DEFAULT_JSON_BYTES_PER_RECORD = 2048


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
        return U32.pack(NONE_U32)
    raw = text.encode("utf-8")
    return U32.pack(len(raw)) + raw


def iter_body(state: VmpState) -> Iterator[bytes]:
    """The canonical body encoding of ``state``, in pieces."""
    yield COUNTS.pack(
        state.dim,
        state.next_record_id,
        state.next_node_id,
        len(state.records),
        len(state.nodes),
        len(state.edges),
    )
    for rec in state.records:
        yield U32.pack(rec.record_id)
        yield rec.vector
        yield _json_field(rec.tags)
        yield _json_field(rec.metadata)
    for node in state.nodes:
        yield NODE_HEAD.pack(
            node.node_id, node.kind, NONE_U32 if node.record_id is None else node.record_id
        )
        yield _json_field(node.metadata)
    for edge in state.edges:
        yield EDGE.pack(edge.src, edge.dst, edge.kind)


def state_hash(state: VmpState) -> str:
    """SHA-256 (hex) of the canonical body of ``state``."""
    digest = hashlib.sha256()
    for piece in iter_body(state):
        digest.update(piece)
    return digest.hexdigest()


def encode_snapshot(state: VmpState) -> bytes:
    """The snapshot bytes of ``state``: header, canonical body, SHA-256 trailer."""
    body = b"".join(iter_body(state))
    head = HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(body))
    return head + body + hashlib.sha256(head + body).digest()


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
    return HEADER_SIZE + COUNTS.size + TRAILER_SIZE + max_records * per_record


def rejected(reason: str) -> InvalidArgument:
    """The refusal of a snapshot, for ``reason`` (content-free)."""
    return InvalidArgument(f"snapshot rejected: {reason}")


def length_mismatch() -> InvalidArgument:
    """The refusal of a snapshot whose size is not the one its header declares."""
    return rejected("length does not match its header (truncated or padded)")


def declared_snapshot_size(head: bytes) -> int:
    """The total size (header + body + trailer) the snapshot beginning with ``head`` declares.

    ``head`` is at least its first HEADER_SIZE bytes: enough to refuse a foreign
    upload, or one announcing more than a cap, before the rest arrives. Raises
    InvalidArgument (too short, not a ratatoskr VMP snapshot, another version,
    unknown flags).
    """
    if len(head) < HEADER_SIZE:
        raise rejected("too short to be a snapshot")
    magic, version, flags, body_length = HEADER.unpack_from(head)
    if magic != MAGIC:
        raise rejected("not a ratatoskr VMP snapshot")
    if version != FORMAT_VERSION:
        raise rejected(f"format version {version} is not supported (expected {FORMAT_VERSION})")
    if flags != 0:
        raise rejected("unknown flags set")
    return HEADER_SIZE + int(body_length) + TRAILER_SIZE
