"""Compaction of a memory file: the vec0 table's dead slots and the file's free pages
go back, and every read answers exactly as before (and as a fresh store does)."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import apsw
import pytest

from bifrost.context import DispatchContext
from ratatoskr.memory import RatatoskrMemoryStore, compact_memory_file, open_memory_store
from ratatoskr.sqlite import Database, ForeignDatabase, Migration, StorageUnavailable

CTX = DispatchContext(actor="agent-1")
DIM = 16
N = 3000  # three vec0 chunks of 1024 slots


def records(n: int, prefix: str = "c", seed: int = 1) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {
            "id": f"{prefix}{i:05d}",
            "embedding": [rng.uniform(-1, 1) for _ in range(DIM)],
            "scope": {"tenant": f"t{i % 3}"},
            "content": "x" * 200,
        }
        for i in range(n)
    ]


def write(store: RatatoskrMemoryStore, recs: list[dict[str, Any]], key: str) -> None:
    for start in range(0, len(recs), 1000):
        store.upsert_many(recs[start : start + 1000], idempotency_key=f"{key}{start}", ctx=CTX)


def delete_most(store: RatatoskrMemoryStore, recs: list[dict[str, Any]]) -> list[str]:
    gone = [r["id"] for i, r in enumerate(recs) if i % 10 < 6]
    for start in range(0, len(gone), 1000):
        store.delete_many(gone[start : start + 1000])
    return gone


def answers(store: RatatoskrMemoryStore) -> list[Any]:
    rng = random.Random(7)
    out: list[Any] = []
    for _ in range(8):
        q = [rng.uniform(-1, 1) for _ in range(DIM)]
        for scope in (None, {"tenant": "t1"}):
            out.append(
                [(r["chunk_id"], r["score"]) for r in store.search(q, top_k=10, scope_all=scope)]
            )
    return out


def vec_chunks(path: str) -> int:
    conn = apsw.Connection(path)
    try:
        return int(conn.execute("SELECT count(*) FROM memory_vec_chunks").fetchall()[0][0])  # type: ignore[arg-type]
    finally:
        conn.close()


def test_deleted_vectors_and_free_pages_go_back(db_file: str) -> None:
    s = open_memory_store(db_file, embedding_dim=DIM)
    recs = records(N)
    write(s, recs, "w")
    delete_most(s, recs)
    live = [r["id"] for i, r in enumerate(recs) if i % 10 >= 6]
    before = answers(s)
    got_before = s.get_many(live[:1000])
    assert vec_chunks(db_file) == 3  # sqlite-vec keeps every deleted vector's slot
    report = s.compact()
    assert report.rebuilt == ("memory_vec",)
    assert report.method == "incremental_vacuum" and report.free_pages_after == 0
    assert report.bytes_after < 0.6 * report.bytes_before
    assert vec_chunks(db_file) == math.ceil(len(live) / 1024)
    assert answers(s) == before and s.get_many(live[:1000]) == got_before
    fresh = open_memory_store(db_file, embedding_dim=DIM)
    assert answers(fresh) == before and fresh.count() == len(live)
    # Still a working store: writes after the rebuild land in vec0 and the index.
    s.upsert_many(records(5, "new", seed=9), idempotency_key="after", ctx=CTX)
    assert fresh.search(records(5, "new", seed=9)[0]["embedding"], top_k=1)[0]["chunk_id"] == (
        "new00000"
    )
    # Nothing left to reclaim: no rebuild, no free pages.
    again = s.compact()
    assert again.rebuilt == () and again.free_pages_after == 0
    s.close()
    fresh.close()


@pytest.mark.slow
def test_churn_grows_vec0_until_compacted(db_file: str) -> None:
    s = open_memory_store(db_file, embedding_dim=DIM)
    recs = records(N)
    write(s, recs, "w")
    delete_most(s, recs)
    write(s, records(1800, "r", seed=2), "r")  # as many new chunks as were deleted
    assert s.count() == N
    assert vec_chunks(db_file) == 5  # 3 + ceil(1800 / 1024): no slot was reused
    s.compact()
    assert vec_chunks(db_file) == 3
    s.close()


def test_another_store_on_the_file_keeps_answering(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    a = open_memory_store(path, embedding_dim=DIM)
    recs = records(N)
    write(a, recs, "w")
    b = open_memory_store(path, embedding_dim=DIM)
    delete_most(a, recs)
    before = answers(b)  # b caught up with a's deletes
    a.compact()
    assert answers(b) == before
    b.upsert_many(records(3, "b", seed=5), idempotency_key="b", ctx=CTX)
    assert answers(a) == answers(b)
    assert a.count() == b.count() == 1203
    a.close()
    b.close()


def test_compact_memory_file_by_path_beside_an_open_store(db_file: str) -> None:
    s = open_memory_store(db_file, embedding_dim=DIM)
    recs = records(N)
    write(s, recs, "w")
    delete_most(s, recs)
    before = answers(s)
    report = compact_memory_file(db_file)
    assert report.rebuilt == ("memory_vec",) and report.free_pages_after == 0
    assert answers(s) == before
    s.upsert_many(records(2, "z"), idempotency_key="z", ctx=CTX)
    assert s.count() == 1202
    s.close()


def test_an_old_file_is_vacuumed_into_incremental(db_file: str) -> None:
    s = open_memory_store(db_file, embedding_dim=DIM)
    recs = records(N)
    write(s, recs, "w")
    s.close()
    conn = apsw.Connection(db_file)  # as files created before this release are
    conn.execute("PRAGMA auto_vacuum=NONE")
    conn.execute("VACUUM")
    conn.close()
    s = open_memory_store(db_file, embedding_dim=DIM)
    delete_most(s, recs)
    before = answers(s)
    report = s.compact()
    assert report.method == "vacuum" and report.rebuilt == ("memory_vec",)
    assert answers(s) == before
    assert s.compact().method == "incremental_vacuum"
    s.close()


def test_compact_memory_file_refuses_other_files(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    with pytest.raises(StorageUnavailable):
        compact_memory_file(str(missing))
    assert not missing.exists()
    other = tmp_path / "affect.db"
    Database(
        str(other), plane="affect", migrations=[Migration(1, "t", "CREATE TABLE t (x)")]
    ).close()
    with pytest.raises(ForeignDatabase):
        compact_memory_file(str(other))


def test_an_in_memory_store_compacts_its_vectors_only() -> None:
    s = open_memory_store(":memory:", embedding_dim=DIM)
    recs = records(N)
    write(s, recs, "w")
    delete_most(s, recs)
    before = answers(s)
    report = s.compact()
    assert (report.method, report.rebuilt) == ("none", ("memory_vec",))
    assert answers(s) == before
    s.close()


def test_free_pages_only_when_the_vectors_are_left_alone(db_file: str) -> None:
    s = open_memory_store(db_file, embedding_dim=DIM)
    recs = records(N)
    write(s, recs, "w")
    delete_most(s, recs)
    before = answers(s)
    report = s.compact(vectors=False)
    assert report.rebuilt == () and report.free_pages_after == 0
    assert vec_chunks(db_file) == 3  # the dead slots stay
    assert compact_memory_file(db_file, vectors=False).rebuilt == ()
    assert answers(s) == before
    assert s.compact().rebuilt == ("memory_vec",)
    s.close()
