"""Snapshots: byte-exact round trips, and every bad blob refused with the state untouched."""

from __future__ import annotations

import hashlib
import io
import random
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from ratatoskr.vmp import CapacityExceeded, InvalidArgument, VmpStore, open_vmp_store
from ratatoskr.vmp import restore as restore_module
from ratatoskr.vmp.canonical import MAX_JSON_BYTES
from ratatoskr.vmp.snapshot import (
    MAGIC,
    EdgeRow,
    NodeRow,
    RecordRow,
    VmpState,
    encode_snapshot,
)
from ratatoskr.vmp.snapshot_reader import decode_snapshot

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


# -- restoring from a file ---------------------------------------------------------------


def test_restore_from_a_path_or_a_file_at_an_offset(
    store: VmpStore, blob: bytes, tmp_path: Path
) -> None:
    with open_vmp_store(":memory:", dim=DIM) as source:
        populate(source)
        digest = source.state_hash()
    path = tmp_path / "snap.bin"
    path.write_bytes(blob)
    store.restore_from_file(path)
    assert store.state_hash() == digest
    store.upsert_vector(vec(5))
    store.restore_from_file(str(path))
    assert store.snapshot() == blob
    store.upsert_vector(vec(5))
    # From the file's position to its end: a snapshot may follow other bytes.
    with open(tmp_path / "framed.bin", "w+b") as framed:
        framed.write(b"prefix" + blob)
        framed.seek(6)
        store.restore_from_file(framed)
    assert store.snapshot() == blob


def test_restore_from_unusable_files_is_refused(store: VmpStore, tmp_path: Path) -> None:
    store.upsert_vector(vec(77))
    before = store.state_hash()

    class Pipe(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def seekable(self) -> bool:
            return False

    for bad in (tmp_path / "missing.bin", io.StringIO("text"), Pipe()):
        with pytest.raises(InvalidArgument):
            store.restore_from_file(bad)  # type: ignore[arg-type]
    assert store.state_hash() == before


def big_blob(records: int, *, dim: int = DIM, pad: int = 0) -> bytes:
    """A valid snapshot built directly (faster than upserting): one document per record,
    each record with ``pad`` characters of metadata."""
    rows = [
        RecordRow(
            i, struct.pack(f"<{dim}i", *range(i, i + dim)), None, f'{{"i":{i},"p":"{"p" * pad}"}}'
        )
        for i in range(records)
    ]
    nodes = [NodeRow(n, n % 2, None if n % 2 == 0 else n // 2, None) for n in range(2 * records)]
    edges = [EdgeRow(2 * i, 2 * i + 1, 1) for i in range(records)]
    return encode_snapshot(VmpState(dim, records, 2 * records, rows, nodes, edges))


@pytest.mark.parametrize(
    "change",
    ["another valid snapshot", "a flipped byte late in the body", "truncated", "extended"],
)
def test_a_file_changed_between_check_and_write_is_rolled_back(
    store: VmpStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """The write pass reads the file again inside the transaction: if it is not the bytes
    the checking pass saw, the restore fails there and nothing of it stays."""
    populate(store)
    before, records = store.state_hash(), store.record_count()
    blob = big_blob(3000)
    path = tmp_path / "snap.bin"
    path.write_bytes(blob)
    real = restore_module.open_snapshot  # type: ignore[attr-defined]  # patched where it is used

    def tamper(file: Any, **kwargs: Any) -> Any:
        if change == "another valid snapshot":
            replacement = big_blob(2999)
        elif change == "a flipped byte late in the body":
            at = len(blob) - 32 - 9 * 3000 - 50  # in the last nodes: rows already inserted
            replacement = blob[:at] + bytes([blob[at] ^ 0x40]) + blob[at + 1 :]
        elif change == "truncated":
            replacement = blob[: len(blob) // 2]
        else:
            replacement = blob + b"\x00"
        here = file.tell()
        file.truncate(0)
        file.seek(0)
        file.write(replacement)
        file.flush()
        file.seek(here)
        return real(file, **kwargs)

    monkeypatch.setattr(restore_module, "open_snapshot", tamper)
    with open(path, "r+b") as file, pytest.raises(InvalidArgument):
        store.restore_from_file(file)
    assert (store.state_hash(), store.record_count()) == (before, records)
    assert store.search_vector(vec(1), 1)[0].record_id == 0


def traced_peak_of_restore(store: VmpStore, snapshot: bytes | Path) -> int:
    """The most Python memory a restore held at once (tracemalloc sees every Python
    allocation; SQLite's page cache is its own, bounded apart)."""
    tracemalloc.start()
    try:
        if isinstance(snapshot, Path):
            store.restore_from_file(snapshot)
        else:
            store.restore(snapshot)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_restore_from_a_file_holds_a_batch_not_the_snapshot(tmp_path: Path) -> None:
    peaks, sizes = [], []
    for records in (3000, 9000):  # 2 KiB of metadata each: 6.4 MB and 19 MB
        path = tmp_path / f"snap{records}.bin"
        path.write_bytes(big_blob(records, pad=2048))
        sizes.append(path.stat().st_size)
        with open_vmp_store(str(tmp_path / f"{records}.db"), dim=DIM, max_records=records) as s:
            peaks.append(traced_peak_of_restore(s, path))
            assert s.record_count() == records
    # A 1 MiB read buffer (and its refill) and a batch of at most 1 MiB of fields,
    # whatever the size; only the two bytes per node grow (24,000 here).
    assert max(peaks) < 5_000_000, peaks
    assert peaks[1] - peaks[0] < 256_000, (peaks, sizes)


@pytest.mark.slow
def test_restore_of_bytes_does_not_copy_them() -> None:
    blob = big_blob(6000, pad=2048)
    with open_vmp_store(":memory:", dim=DIM, max_records=6000) as s:
        peak = traced_peak_of_restore(s, blob)
    assert peak < len(blob) / 2, (peak, len(blob))


# -- the size of one JSON field ------------------------------------------------------------


def test_a_stored_json_field_is_at_most_16_mib(store: VmpStore) -> None:
    most = "x" * (MAX_JSON_BYTES - 2)  # its canonical text has two quotes more
    result = store.upsert_vector(vec(1), metadata=most)
    for too_big in ("x" * (MAX_JSON_BYTES - 1), "é" * (MAX_JSON_BYTES // 2)):
        with pytest.raises(InvalidArgument, match="exceeds"):
            store.upsert_vector(vec(2), metadata=too_big)
        with pytest.raises(InvalidArgument, match="exceeds"):
            store.set_metadata(result.memory_id, too_big)
    with pytest.raises(InvalidArgument, match="exceeds"):
        store.upsert_vector(vec(2), tags=["x" * MAX_JSON_BYTES])
    assert store.record_count() == 1
    # The largest field there can be round-trips through a snapshot.
    blob = store.snapshot()
    with open_vmp_store(":memory:", dim=DIM) as other:
        other.restore(blob)
        assert other.get_metadata("rec:0") == most


def test_a_snapshot_field_above_16_mib_is_refused(store: VmpStore) -> None:
    text = '"' + "x" * (MAX_JSON_BYTES - 1) + '"'
    rows = [RecordRow(0, bytes(4 * DIM), None, text)]
    nodes = [NodeRow(0, 0, None, None), NodeRow(1, 1, 0, None)]
    bad = encode_snapshot(VmpState(DIM, 1, 2, rows, nodes, [EdgeRow(0, 1, 1)]))
    store.upsert_vector(vec(77))
    assert_refused(store, bad)
