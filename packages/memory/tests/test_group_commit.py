"""Upserts sharing one COMMIT (ratatoskr.sqlite.group): each keeps its own atomicity,
idempotency, revision, grant and quota checks, and the in-process index mirrors
exactly the committed ones."""

from __future__ import annotations

import functools
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bifrost.context import DispatchContext
from bifrost.errors import Forbidden, IdempotencyConflict, QuotaExceeded, RevisionMismatch
from bifrost.quota import memory_quota
from ratatoskr.memory import RatatoskrMemoryStore, changes, open_memory_store
from ratatoskr.sqlite.crashtest import kill_mid_stream
from ratatoskr.sqlite.grouptest import run_grouped

from .conftest import DIM, chunk
from .crash_writer import BATCH as CRASH_BATCH

CTX = DispatchContext(actor="agent-1")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RatatoskrMemoryStore]:
    s = open_memory_store(str(tmp_path / "memory.db"), embedding_dim=DIM)
    yield s
    s.close()


def upsert(
    store: RatatoskrMemoryStore,
    records: list[dict[str, Any]],
    key: str,
    ctx: DispatchContext = CTX,
    **kw: Any,
) -> Callable[[], Any]:
    return functools.partial(store.upsert_many, records, idempotency_key=key, ctx=ctx, **kw)


def stored(store: RatatoskrMemoryStore) -> dict[str, int]:
    with store.database.read() as conn:
        return {
            str(c): int(r) for c, r in conn.execute("SELECT chunk_id, revision FROM memory_chunks")
        }


def index_matches(store: RatatoskrMemoryStore) -> None:
    """The in-process index holds exactly the stored chunks, at the database's counter
    (mirrored by the committed batches' after-commit steps, no catch-up needed)."""
    with store.database.read() as conn:
        db_seq = changes.seq(conn)
    sync = store._sync
    assert sync.seq == db_seq
    assert sorted(sync.index._row) == sorted(stored(store))


def test_one_failing_batch_leaves_the_rest_of_its_group_committed(
    store: RatatoskrMemoryStore,
) -> None:
    store.upsert_many([chunk("old", 1)], idempotency_key="seed", ctx=CTX)
    store.upsert_many(
        [chunk("theirs", 2, scope={"tenant": "t2"})],
        idempotency_key="seed2",
        ctx=DispatchContext(actor="agent-2", scope={"tenant": "t2"}),
    )
    t1 = DispatchContext(actor="agent-1", scope={"tenant": "t1"})
    out = run_grouped(
        store.database,
        [
            upsert(store, [chunk("a", 3)], "k-a"),
            # Revision check: "old" is at revision 1.
            upsert(store, [chunk("r", 4), chunk("old", 5)], "k-r", expected_revisions={"old": 7}),
            upsert(store, [chunk("b", 6)], "k-b"),
            # Grant, inside the transaction: "theirs" is stored under t2.
            upsert(store, [chunk("g", 7), chunk("theirs", 8)], "k-g", ctx=t1),
            # Idempotency: the key of "a"'s batch (earlier in this group) with another body.
            upsert(store, [chunk("c", 9)], "k-a"),
            upsert(store, [chunk("old", 10)], "k-old", expected_revisions={"old": 1}),
        ],
    )
    assert out[0] == {"upserted": 1, "replayed": False}
    assert isinstance(out[1], RevisionMismatch)
    assert out[2] == {"upserted": 1, "replayed": False}
    assert isinstance(out[3], Forbidden)
    assert isinstance(out[4], IdempotencyConflict)
    assert out[5] == {"upserted": 1, "replayed": False}
    assert stored(store) == {"old": 2, "theirs": 1, "a": 1, "b": 1}
    index_matches(store)
    # Each batch saw the earlier ones: a replay of "a"'s batch is a replay, not a write.
    assert store.upsert_many([chunk("a", 3)], idempotency_key="k-a", ctx=CTX)["replayed"]


def test_a_replay_inside_the_same_group_answers_from_the_first(
    store: RatatoskrMemoryStore,
) -> None:
    out = run_grouped(
        store.database,
        [upsert(store, [chunk("x", 1)], "same"), upsert(store, [chunk("x", 1)], "same")],
    )
    assert out == [{"upserted": 1, "replayed": False}, {"upserted": 1, "replayed": True}]
    assert stored(store) == {"x": 1}


def test_revisions_of_one_id_written_twice_in_a_group(store: RatatoskrMemoryStore) -> None:
    out = run_grouped(
        store.database,
        [
            upsert(store, [chunk("x", 1)], "w1", expected_revisions={"x": 0}),
            upsert(store, [chunk("x", 2)], "w2", expected_revisions={"x": 1}),
            upsert(store, [chunk("x", 3)], "w3", expected_revisions={"x": 1}),  # stale now
        ],
    )
    assert out[:2] == [{"upserted": 1, "replayed": False}] * 2
    assert isinstance(out[2], RevisionMismatch)
    assert stored(store) == {"x": 2}
    got = store.get("x")
    assert got is not None and got["embedding"] == chunk("x", 2)["embedding"]
    index_matches(store)


def test_the_quota_check_counts_the_earlier_batches_of_the_group(tmp_path: Path) -> None:
    store = open_memory_store(str(tmp_path / "q.db"), embedding_dim=DIM, quota=memory_quota(3, 0))
    try:
        out = run_grouped(
            store.database,
            [
                upsert(store, [chunk("a", 1), chunk("b", 2)], "q1"),
                upsert(store, [chunk("c", 3), chunk("d", 4)], "q2"),  # 4 > 3
                upsert(store, [chunk("e", 5)], "q3"),  # 3: fits
            ],
        )
        assert out[0]["upserted"] == 2 and out[2]["upserted"] == 1
        assert isinstance(out[1], QuotaExceeded)
        assert stored(store) == {"a": 1, "b": 1, "e": 1}
        index_matches(store)
    finally:
        store.close()


def test_eight_writers_end_where_a_serial_run_ends(tmp_path: Path) -> None:
    """8 threads x 25 batches over overlapping ids, some batches sent twice: every id's
    revision is the number of distinct batches that wrote it, every resend a replay."""
    store = open_memory_store(str(tmp_path / "c.db"), embedding_dim=DIM)
    plan = [
        [(f"t{t}-{i}", [f"id{(t * 7 + i * 3 + j) % 40}" for j in range(3)]) for i in range(25)]
        for t in range(8)
    ]
    answers: list[list[dict[str, Any]]] = [[] for _ in plan]
    errors: list[BaseException] = []

    def writer(t: int) -> None:
        rng = random.Random(t)
        try:
            for key, ids in plan[t]:
                recs = [chunk(cid, hash((key, cid)) % 1000) for cid in ids]
                answers[t].append(store.upsert_many(recs, idempotency_key=key, ctx=CTX))
                if rng.random() < 0.3:  # a retry of the same call
                    again = store.upsert_many(recs, idempotency_key=key, ctx=CTX)
                    assert again == {"upserted": 3, "replayed": True}
        except BaseException as exc:  # reported below
            errors.append(exc)

    try:
        threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert errors == []
        assert all(a == {"upserted": 3, "replayed": False} for ans in answers for a in ans)
        want: dict[str, int] = {}
        for batches in plan:
            for _key, ids in batches:
                for cid in ids:
                    want[cid] = want.get(cid, 0) + 1
        assert stored(store) == want
        index_matches(store)
        group = store.database.group
        assert group is not None and group.batches >= 200
        hits = store.search(chunk("id5", 0)["embedding"], top_k=40)
        assert sorted(h["chunk_id"] for h in hits) == sorted(want)
    finally:
        store.close()


GROUP_WRITER = Path(__file__).with_name("group_crash_writer.py")


@pytest.mark.slow
def test_sigkill_during_group_commits_keeps_every_acknowledged_batch(tmp_path: Path) -> None:
    """8 writer threads share commits; SIGKILL at random moments: every acknowledged
    batch is whole after the restart, no batch is partial, and the reopened store's
    index and vec0 rows agree with its chunks."""
    db = str(tmp_path / "crash.db")
    for round_ in range(3):
        acks = kill_mid_stream(
            [str(GROUP_WRITER), db, str(round_)],
            min_acks=24,
            rng=random.Random(round_),
            max_delay_s=0.2,
        )
        store = open_memory_store(db, embedding_dim=DIM)
        try:
            with store.database.read() as conn:
                vecs = int(conn.execute("SELECT count(*) FROM memory_vec").fetchall()[0][0])  # type: ignore[arg-type]
            ids = stored(store)
            assert len(ids) == vecs and set(ids.values()) == {1}
            by_batch: dict[int, int] = {}
            for cid in ids:
                n = int(cid[1:].split("-")[0])
                by_batch[n] = by_batch.get(n, 0) + 1
            assert set(by_batch.values()) == {CRASH_BATCH}, "a partial batch"
            assert set(acks) <= set(by_batch), "an acknowledged batch was lost"
            index_matches(store)
        finally:
            store.close()
