"""Snapshots: byte-exact round trips, and every bad blob refused with the state untouched."""

from __future__ import annotations

import hashlib
import random
import struct

import pytest

from ratatoskr.vmp import CapacityExceeded, InvalidArgument, VmpStore, open_vmp_store
from ratatoskr.vmp.snapshot import MAGIC, decode_snapshot, encode_snapshot

from .conftest import DIM, vec


def populate(store: VmpStore) -> None:
    store.upsert_vector(vec(1), tags=["t1", "t2"], metadata={"z": 1, "a": "ü"})
    store.upsert_vector(vec(2), attach_to_document_node=0)
    store.upsert_vector([-32768.0, 32767.99, 0.0, -0.0])
    store.set_metadata("node:0", {"title": "a document"})
    store.set_metadata("node:4", [1, 2, 3])


@pytest.fixture
def blob() -> bytes:
    with open_vmp_store(":memory:", dim=DIM) as source:
        populate(source)
        return source.snapshot()


def reseal(content: bytes) -> bytes:
    """Header + body with a fresh, valid checksum: tests the checks after the checksum."""
    head = struct.pack("<8sHHQ", MAGIC, 1, 0, len(content) - 20)
    return head + content[20:] + hashlib.sha256(head + content[20:]).digest()


def test_round_trip_is_byte_exact(store: VmpStore, blob: bytes) -> None:
    store.restore(blob)
    assert store.snapshot() == blob
    with open_vmp_store(":memory:", dim=DIM) as again:
        populate(again)
        assert again.state_hash() == store.state_hash()
    assert store.get_metadata("rec:0") == {"a": "ü", "z": 1}
    assert store.get_metadata("node:4") == [1, 2, 3]


def test_counters_are_state_and_continue_after_restore(store: VmpStore, blob: bytes) -> None:
    store.upsert_vector(vec(50))  # state the restore replaces
    store.restore(blob)
    nxt = store.upsert_vector(vec(9))
    assert (nxt.record_id, nxt.document_node_id, nxt.chunk_node_id) == (3, 5, 6)
    assert store.upsert_vector(vec(10), attach_to_document_node=3).chunk_node_id == 7


def test_hash_is_the_body_hash(blob: bytes) -> None:
    with open_vmp_store(":memory:", dim=DIM) as s:
        s.restore(blob)
        assert s.state_hash() == hashlib.sha256(blob[20:-32]).hexdigest()
        empty = open_vmp_store(":memory:", dim=DIM)
        assert empty.state_hash() != s.state_hash()
        assert len(empty.state_hash()) == 64


def assert_refused(store: VmpStore, bad: bytes) -> None:
    before = store.state_hash()
    with pytest.raises(InvalidArgument) as info:
        store.restore(bad)
    assert info.value.status == 400
    assert info.value.message.startswith("snapshot rejected")
    assert store.state_hash() == before


def test_every_bit_flip_is_refused(store: VmpStore, blob: bytes) -> None:
    store.upsert_vector(vec(77))
    rng = random.Random(3)
    positions = list(range(len(blob))) if len(blob) < 400 else rng.sample(range(len(blob)), 400)
    for pos in positions:
        bad = bytearray(blob)
        bad[pos] ^= 1 << rng.randrange(8)
        assert_refused(store, bytes(bad))


def test_every_truncation_is_refused(store: VmpStore, blob: bytes) -> None:
    store.upsert_vector(vec(77))
    for size in range(len(blob)):
        assert_refused(store, blob[:size])
    assert_refused(store, blob + b"\x00")


@pytest.mark.parametrize("size", [0, 1, 52, 64, 1000])
def test_foreign_bytes_are_refused(store: VmpStore, size: int) -> None:
    store.upsert_vector(vec(77))
    assert_refused(store, random.Random(size).randbytes(size))
    assert_refused(store, b"SQLite format 3\x00" + bytes(size))


def test_other_dim_is_refused(store: VmpStore) -> None:
    with open_vmp_store(":memory:", dim=DIM + 1) as other:
        other.upsert_vector([1.0] * (DIM + 1))
        foreign = other.snapshot()
    store.upsert_vector(vec(77))
    assert_refused(store, foreign)


def test_other_version_and_flags_are_refused(store: VmpStore, blob: bytes) -> None:
    for version, flags in ((2, 0), (0, 0), (1, 1)):
        head = struct.pack("<8sHHQ", MAGIC, version, flags, len(blob) - 52)
        body = blob[20:-32]
        assert_refused(store, head + body + hashlib.sha256(head + body).digest())


def test_inconsistent_content_is_refused_even_with_a_valid_checksum(
    store: VmpStore, blob: bytes
) -> None:
    store.upsert_vector(vec(77))
    content = blob[:-32]
    state = decode_snapshot(blob, dim=DIM)
    body = 20
    # next_record_id disagrees with the records.
    bad = bytearray(content)
    bad[body + 4] += 1
    assert_refused(store, reseal(bytes(bad)))
    # First record id is not 0.
    bad = bytearray(content)
    bad[body + 24] = 5
    assert_refused(store, reseal(bytes(bad)))
    # A vector value beyond 32767.99.
    bad = bytearray(content)
    bad[body + 28 : body + 32] = struct.pack("<i", 2**31 - 1)
    assert_refused(store, reseal(bytes(bad)))
    # Non-canonical JSON (a space) in the first record's tags.
    tags = state.records[0].tags
    assert tags is not None
    at = content.index(tags.encode())
    spaced = tags.replace(",", ", ").encode()
    bad = bytearray(content[: at - 4] + struct.pack("<I", len(spaced)) + spaced)
    bad += content[at + len(tags) :]
    assert_refused(store, reseal(bytes(bad)))
    # Edges out of canonical order / pointing at the wrong nodes.
    edges_at = len(content) - 9 * len(state.edges)
    swapped = content[:edges_at] + content[edges_at + 9 : edges_at + 18]
    swapped += content[edges_at : edges_at + 9] + content[edges_at + 18 :]
    assert_refused(store, reseal(swapped))
    bad = bytearray(content)
    bad[edges_at : edges_at + 4] = struct.pack("<I", 1)  # chunk node as a parent
    assert_refused(store, reseal(bytes(bad)))


def test_reencoding_the_decoded_state_gives_the_same_bytes(blob: bytes) -> None:
    assert encode_snapshot(decode_snapshot(blob, dim=DIM)) == blob


def test_restore_over_capacity_is_refused(blob: bytes) -> None:
    with open_vmp_store(":memory:", dim=DIM, max_records=2) as small:
        small.upsert_vector(vec(1))
        before = small.state_hash()
        with pytest.raises(CapacityExceeded):
            small.restore(blob)
        assert small.state_hash() == before


def test_restore_of_an_empty_snapshot_empties_the_store(store: VmpStore) -> None:
    with open_vmp_store(":memory:", dim=DIM) as empty:
        nothing = empty.snapshot()
        digest = empty.state_hash()
    populate(store)
    store.restore(nothing)
    assert store.state_hash() == digest
    assert store.search_vector(vec(1), 5) == []
    assert store.upsert_vector(vec(1)).record_id == 0
