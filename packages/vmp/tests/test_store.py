"""The store: ids, atomic upserts, metadata, capacity, files, threads and other writers."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import apsw
import pytest

from ratatoskr.sqlite import ConnectionOptions, SchemaMismatch, StorageUnavailable
from ratatoskr.vmp import (
    CapacityExceeded,
    DimMismatch,
    InvalidArgument,
    NotFound,
    SearchHit,
    VmpStore,
    open_vmp_store,
)
from ratatoskr.vmp.errors import InternalError
from ratatoskr.vmp.fixedpoint import squared_l2, to_fixed_vector

from .conftest import DIM, vec


def test_ids_follow_the_spec(store: VmpStore) -> None:
    first = store.upsert_vector(vec(1))
    second = store.upsert_vector(vec(2))
    assert (first.record_id, first.document_node_id, first.chunk_node_id) == (0, 0, 1)
    assert (second.record_id, second.document_node_id, second.chunk_node_id) == (1, 2, 3)
    assert first.memory_id == "rec:0"
    attached = store.upsert_vector(vec(3), attach_to_document_node=0)
    assert (attached.record_id, attached.document_node_id, attached.chunk_node_id) == (2, 0, 4)
    third = store.upsert_vector(vec(4))
    assert (third.record_id, third.document_node_id, third.chunk_node_id) == (3, 5, 6)
    assert store.record_count() == 4


@pytest.mark.parametrize("target", [1, 3, 99, 2**32 - 1])
def test_attach_to_chunk_or_unknown_node_writes_nothing(store: VmpStore, target: int) -> None:
    store.upsert_vector(vec(1))
    store.upsert_vector(vec(2))
    before = store.state_hash()
    with pytest.raises(NotFound) as info:
        store.upsert_vector(vec(3), attach_to_document_node=target)
    assert info.value.status == 404
    assert store.state_hash() == before
    # No id was consumed by the failed call.
    assert store.upsert_vector(vec(3)).record_id == 2


@pytest.mark.parametrize("target", [-1, 2**32, True, 1.0, "0"])
def test_attach_must_be_u32(store: VmpStore, target: object) -> None:
    store.upsert_vector(vec(1))
    with pytest.raises(InvalidArgument):
        store.upsert_vector(vec(2), attach_to_document_node=target)  # type: ignore[arg-type]


def test_capacity_exceeded_writes_nothing(tmp_path: Path) -> None:
    with open_vmp_store(str(tmp_path / "v.db"), dim=DIM, max_records=3) as store:
        for seed in range(3):
            store.upsert_vector(vec(seed))
        before = store.state_hash()
        with pytest.raises(CapacityExceeded) as info:
            store.upsert_vector(vec(9))
        assert info.value.status == 507
        with pytest.raises(CapacityExceeded):
            store.upsert_vector(vec(9), attach_to_document_node=0)
        assert store.state_hash() == before
        assert store.record_count() == 3


def test_bad_vectors_write_nothing(store: VmpStore) -> None:
    store.upsert_vector(vec(1))
    before = store.state_hash()
    with pytest.raises(DimMismatch):
        store.upsert_vector([1.0] * (DIM + 1))
    with pytest.raises(InvalidArgument):
        store.upsert_vector([1.0, 2.0, 3.0, 40000.0])
    with pytest.raises(InvalidArgument):
        store.upsert_vector(vec(2), tags=["ok", 3])  # type: ignore[list-item]
    with pytest.raises(InvalidArgument):
        store.upsert_vector(vec(2), metadata={"x": float("nan")})
    with pytest.raises(InvalidArgument):
        store.upsert_vector(vec(2), metadata={1: "non-string key"})
    assert store.state_hash() == before


def test_metadata_on_records_and_nodes(store: VmpStore) -> None:
    store.upsert_vector(vec(1), tags=["a"], metadata={"b": 1, "a": [1.5, None, "x"]})
    assert store.get_metadata("rec:0") == {"a": [1.5, None, "x"], "b": 1}
    assert store.get_metadata("node:0") is None
    store.set_metadata("node:0", {"title": "doc"})
    store.set_metadata("node:1", "chunk")
    assert store.get_metadata("node:0") == {"title": "doc"}
    assert store.get_metadata("node:1") == "chunk"
    store.set_metadata("rec:0", None)
    assert store.get_metadata("rec:0") is None
    # Unknown or malformed targets read as null; writing them is refused.
    for target in ("rec:1", "node:2", "rec:01", "rec:-1", "record:0", "", "rec:99999999999"):
        assert store.get_metadata(target) is None
    before = store.state_hash()
    with pytest.raises(NotFound):
        store.set_metadata("rec:1", {"x": 1})
    with pytest.raises(NotFound):
        store.set_metadata("node:7", {"x": 1})
    with pytest.raises(InvalidArgument):
        store.set_metadata("rec:01", {"x": 1})
    with pytest.raises(InvalidArgument):
        store.set_metadata("doc:0", {"x": 1})
    assert store.state_hash() == before


def test_metadata_changes_the_hash(store: VmpStore) -> None:
    store.upsert_vector(vec(1))
    before = store.state_hash()
    store.set_metadata("rec:0", {"k": "v"})
    assert store.state_hash() != before
    store.set_metadata("rec:0", None)
    assert store.state_hash() == before


def test_search_orders_by_exact_score_then_record_id(store: VmpStore) -> None:
    vectors = [vec(5), vec(6), vec(5), [0.0] * DIM, vec(6)]
    for i, v in enumerate(vectors):
        store.upsert_vector(v, metadata={"i": i})
    hits = store.search_vector(vec(5), 5)
    fixed = [to_fixed_vector(v, DIM) for v in vectors]
    query = to_fixed_vector(vec(5), DIM)
    expected = sorted((squared_l2(f, query), rid) for rid, f in enumerate(fixed))
    assert [(h.squared_distance, h.record_id) for h in hits] == expected
    assert [h.record_id for h in hits[:2]] == [0, 2]
    assert hits[0].score == 0.0
    assert hits[0].metadata == {"i": 0}
    assert [h.score for h in hits] == [d / 2**32 for d, _ in expected]
    assert store.search_vector(vec(5), 2) == hits[:2]


@pytest.mark.parametrize("k", [0, 1001, -1, True, 2.0, "5", None])
def test_search_k_bounds(store: VmpStore, k: object) -> None:
    with pytest.raises(InvalidArgument):
        store.search_vector(vec(1), k)  # type: ignore[arg-type]


def test_search_dim_mismatch(store: VmpStore) -> None:
    store.upsert_vector(vec(1))
    with pytest.raises(DimMismatch):
        store.search_vector([0.0] * (DIM - 1), 1)
    assert store.search_vector(vec(1), 1000)[0].record_id == 0


def test_empty_store_search(store: VmpStore) -> None:
    assert store.search_vector(vec(1), 3) == []
    assert store.health() == {"status": "ok", "dim": DIM, "records": 0}


def test_file_store_survives_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "vmp.db")
    with open_vmp_store(path, dim=DIM) as store:
        for seed in range(20):
            store.upsert_vector(vec(seed), tags=[str(seed)], metadata={"seed": seed})
        store.upsert_vector(vec(99), attach_to_document_node=4)
        store.set_metadata("node:4", {"doc": True})
        digest = store.state_hash()
        blob = store.snapshot()
        hits = store.search_vector(vec(3), 5)
    with open_vmp_store(path, dim=DIM) as reopened:
        assert reopened.state_hash() == digest
        assert reopened.snapshot() == blob
        assert reopened.search_vector(vec(3), 5) == hits
        assert reopened.upsert_vector(vec(100)).record_id == 21
    with pytest.raises(SchemaMismatch):
        open_vmp_store(path, dim=DIM + 1)


def test_open_validates_configuration(tmp_path: Path) -> None:
    for dim in (0, 4097, True):
        with pytest.raises(ValueError, match="dim"):
            open_vmp_store(":memory:", dim=dim)
    for max_records in (0, 2**31):
        with pytest.raises(ValueError, match="max_records"):
            open_vmp_store(":memory:", max_records=max_records)


def test_concurrent_upserts_from_threads(tmp_path: Path) -> None:
    with open_vmp_store(str(tmp_path / "vmp.db"), dim=DIM) as store:
        results: list[int] = []
        lock = threading.Lock()

        def writer(offset: int) -> None:
            for i in range(25):
                rid = store.upsert_vector(vec(offset * 100 + i)).record_id
                store.search_vector(vec(i), 3)
                with lock:
                    results.append(rid)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == list(range(100))
        assert store.record_count() == 100
        assert len(store.search_vector(vec(0), 1000)) == 100


def test_second_store_on_one_file_sees_the_others_writes(tmp_path: Path) -> None:
    # Two stores on one file stand in for two processes: each keeps its own vector cache.
    path = str(tmp_path / "vmp.db")
    fast = ConnectionOptions(synchronous="OFF")
    with (
        open_vmp_store(path, dim=DIM, options=fast) as a,
        open_vmp_store(path, dim=DIM, options=fast) as b,
    ):
        a.upsert_vector(vec(1))
        assert [h.record_id for h in b.search_vector(vec(1), 5)] == [0]
        b.upsert_vector(vec(2))
        a.upsert_vector(vec(2), attach_to_document_node=2)
        assert sorted(h.record_id for h in b.search_vector(vec(2), 5)) == [0, 1, 2]
        assert a.state_hash() == b.state_hash()
        # A restore through one replaces what the other searches.
        fresh = open_vmp_store(":memory:", dim=DIM)
        fresh.upsert_vector(vec(7))
        a.restore(fresh.snapshot())
        hits = b.search_vector(vec(2), 5)
        assert [h.record_id for h in hits] == [0]
        assert hits[0].squared_distance == squared_l2(
            to_fixed_vector(vec(7), DIM), to_fixed_vector(vec(2), DIM)
        )


def test_held_route_answers_as_the_general_route(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # From memory (rows and metadata flags, proven by the probe) and through the
    # general route's read transaction: the same hits, metadata included, bit for bit.
    path = str(tmp_path / "vmp.db")
    with open_vmp_store(path, dim=DIM, options=ConnectionOptions(synchronous="OFF")) as store:
        for i in range(40):
            store.upsert_vector(vec(i), metadata={"i": i} if i % 3 else None)
        store.set_metadata("rec:4", {"changed": True})
        store.set_metadata("rec:5", None)
        store.set_metadata("rec:6", {"now": "set"})
        queries = [vec(1000 + j) for j in range(20)] + [vec(j) for j in range(3, 8)]
        held = [store.search_vector(q, 7) for q in queries]
        assert {h.record_id: h.metadata for hits in held for h in hits}.get(6) == {"now": "set"}
        taken: list[bool] = []
        original = store._search_held

        def spy(*args: Any) -> list[SearchHit] | None:
            answer = original(*args)
            taken.append(answer is not None)
            return answer

        monkeypatch.setattr(store, "_search_held", spy)
        assert [store.search_vector(q, 7) for q in queries] == held
        assert all(taken) and len(taken) == len(queries)
        monkeypatch.setattr(store, "_search_held", lambda *args: None)
        assert [store.search_vector(q, 7) for q in queries] == held


def test_probe_sees_another_writer_at_once(tmp_path: Path) -> None:
    # Another store on the file stands in for another process: its upsert, metadata
    # change and restore are each seen by the very next search through the probe.
    path = str(tmp_path / "vmp.db")
    fast = ConnectionOptions(synchronous="OFF")
    with (
        open_vmp_store(path, dim=DIM, options=fast) as a,
        open_vmp_store(path, dim=DIM, options=fast) as b,
    ):
        a.upsert_vector(vec(1))
        assert [h.record_id for h in b.search_vector(vec(1), 5)] == [0]
        a.upsert_vector(vec(1), metadata={"m": 1})
        hits = b.search_vector(vec(1), 5)
        assert [(h.record_id, h.metadata) for h in hits] == [(0, None), (1, {"m": 1})]
        a.set_metadata("rec:0", {"m": 0})
        assert [h.metadata for h in b.search_vector(vec(1), 5)] == [{"m": 0}, {"m": 1}]
        fresh = open_vmp_store(":memory:", dim=DIM)
        fresh.upsert_vector(vec(9))
        a.restore(fresh.snapshot())
        assert [(h.record_id, h.metadata) for h in b.search_vector(vec(1), 5)] == [(0, None)]


def test_closed_store_search_fails_typed(tmp_path: Path) -> None:
    store = open_vmp_store(str(tmp_path / "vmp.db"), dim=DIM)
    store.upsert_vector(vec(1))
    store.close()
    store.close()
    with pytest.raises(InternalError):
        store.search_vector(vec(1), 1)


def test_probe_failure_is_a_typed_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Busy:
        def execute(self, *args: object) -> object:
            raise apsw.BusyError("locked")

    with open_vmp_store(str(tmp_path / "vmp.db"), dim=DIM) as store:
        store.upsert_vector(vec(1))
        monkeypatch.setattr(store, "_probe", Busy())
        with pytest.raises(InternalError) as info:
            store.search_vector(vec(1), 1)
        assert isinstance(info.value.__cause__, StorageUnavailable)
        monkeypatch.undo()
        assert [h.record_id for h in store.search_vector(vec(1), 1)] == [0]


_OTHER_PROCESS = """
import sys
from ratatoskr.vmp import open_vmp_store
with open_vmp_store(sys.argv[1], dim=int(sys.argv[2])) as store:
    store.upsert_vector([0.5] * int(sys.argv[2]), metadata={"from": "another process"})
    store.set_metadata("rec:0", {"changed": "elsewhere"})
"""


def test_another_process_is_seen_by_the_next_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real second process on the file: its upsert and its metadata update are in the
    # very next search of a store that answered from memory just before.
    path = str(tmp_path / "vmp.db")
    with open_vmp_store(path, dim=DIM) as store:
        store.upsert_vector([0.0] * DIM)
        assert [(h.record_id, h.metadata) for h in store.search_vector([0.5] * DIM, 5)] == [
            (0, None)
        ]
        subprocess.run([sys.executable, "-c", _OTHER_PROCESS, path, str(DIM)], check=True)
        hits = store.search_vector([0.5] * DIM, 5)
        assert [(h.record_id, h.metadata) for h in hits] == [
            (1, {"from": "another process"}),
            (0, {"changed": "elsewhere"}),
        ]
        assert hits[0].squared_distance == 0
        # The general route reloaded the rows and flags: the next search is from memory.
        monkeypatch.setattr(store, "_db", None)  # any use of the reader would fail
        assert store.search_vector([0.5] * DIM, 5) == hits
        monkeypatch.undo()
