"""Concurrent writers on separate connections get exactly one winner.

Eight threads, each with a connection of its own (two stores on two pools of
four, as two provider processes would have), are released at once by a barrier:
- the same idempotency key and payload → one write, seven replays;
- the same new id with ``expected_revisions = {id: 0}`` → one success, seven
  RevisionMismatch (expected 0, actual 1);
- overlapping batches in opposite orders → no deadlock, every write counted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bifrost.context import DispatchContext
from bifrost.errors import RevisionMismatch
from ratatoskr.affect.postgres import PostgresAffectStore, open_postgres_affect_store
from ratatoskr.memory.postgres import PostgresMemoryStore, open_postgres_memory_store
from ratatoskr.postgres import PoolOptions

WRITERS = 8
ROUNDS = 4
CTX = DispatchContext(actor="racer", plane="memory")


def _race(work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(i)`` in WRITERS threads released together; results or exceptions."""
    barrier = threading.Barrier(WRITERS)
    out: list[Any] = [None] * WRITERS

    def run(i: int) -> None:
        barrier.wait()
        try:
            out[i] = work(i)
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def _chunk(cid: str, v: float = 1.0) -> dict[str, Any]:
    return {"id": cid, "embedding": [v, 0.5, 0.25, 0.0], "scope": {"tenant": "t"}}


@pytest.fixture
def memory_pair(pg_dsn: str, schema: str) -> Iterator[list[PostgresMemoryStore]]:
    """Two stores on one schema, each with its own pool of WRITERS / 2 connections."""
    opts = PoolOptions(min_size=WRITERS // 2, max_size=WRITERS // 2)
    stores = [
        open_postgres_memory_store(pg_dsn, schema=schema, embedding_dim=4, pool_options=opts)
        for _ in range(2)
    ]
    yield stores
    for s in stores:
        s.close()


@pytest.fixture
def affect_pair(pg_dsn: str, schema: str) -> Iterator[list[PostgresAffectStore]]:
    opts = PoolOptions(min_size=WRITERS // 2, max_size=WRITERS // 2)
    stores = [
        open_postgres_affect_store(pg_dsn, schema=schema, pool_options=opts) for _ in range(2)
    ]
    yield stores
    for s in stores:
        s.close()


def test_memory_same_idempotency_key(memory_pair: list[PostgresMemoryStore]) -> None:
    for r in range(ROUNDS):
        batch = [_chunk(f"k{r}-a"), _chunk(f"k{r}-b", 2.0)]

        def same_key(i: int, batch: list[dict[str, Any]] = batch, r: int = r) -> Any:
            return memory_pair[i % 2].upsert_many(batch, idempotency_key=f"key-{r}", ctx=CTX)

        results = _race(same_key)
        assert sorted(res["replayed"] for res in results) == [False] + [True] * 7
        assert all(res["upserted"] == 2 for res in results)
        got = memory_pair[0].get(f"k{r}-a")
        assert got is not None
        assert got["revision"] == 1  # written once


def test_memory_same_new_id_expected_zero(memory_pair: list[PostgresMemoryStore]) -> None:
    for r in range(ROUNDS):
        cid = f"new-{r}"

        def create(i: int, cid: str = cid, r: int = r) -> Any:
            return memory_pair[i % 2].upsert_many(
                [_chunk(cid, float(i + 1))],
                idempotency_key=f"create-{r}-{i}",
                ctx=CTX,
                expected_revisions={cid: 0},
            )

        results = _race(create)
        wins = [res for res in results if isinstance(res, dict)]
        losses = [res for res in results if isinstance(res, RevisionMismatch)]
        assert len(wins) == 1 and len(losses) == 7, results
        assert all(e.details == {"id": cid, "expected": 0, "actual": 1} for e in losses)
        got = memory_pair[1].get(cid)
        assert got is not None
        assert got["revision"] == 1
        # The losers' keys were not consumed: a retry without the expectation applies.
        loser = next(i for i, res in enumerate(results) if isinstance(res, RevisionMismatch))
        again = memory_pair[0].upsert_many(
            [_chunk(cid, 9.0)], idempotency_key=f"create-{r}-{loser}", ctx=CTX
        )
        assert again == {"upserted": 1, "replayed": False}


def test_memory_overlapping_batches_do_not_deadlock(memory_pair: list[PostgresMemoryStore]) -> None:
    ids = [f"o{i}" for i in range(20)]

    def work(i: int) -> Any:
        order = ids if i % 2 else list(reversed(ids))
        for n in range(5):
            memory_pair[i % 2].upsert_many(
                [_chunk(cid, float(n + 1)) for cid in order], idempotency_key=f"{i}-{n}", ctx=CTX
            )
        return True

    assert _race(work) == [True] * WRITERS
    revisions = {r["revision"] for r in memory_pair[0].get_many(ids)}
    assert revisions == {WRITERS * 5}


def test_affect_same_idempotency_key(affect_pair: list[PostgresAffectStore]) -> None:
    for r in range(ROUNDS):
        batch = [{"key": f"s{r}", "scope": {"tenant": "t"}, "v": r}]

        def same_key(i: int, batch: list[dict[str, Any]] = batch, r: int = r) -> Any:
            return affect_pair[i % 2].put_many(batch, idempotency_key=f"key-{r}", ctx=CTX)

        results = _race(same_key)
        assert sorted(res["replayed"] for res in results) == [False] + [True] * 7
        assert len(affect_pair[0].history(f"s{r}")["items"]) == 1


def test_affect_same_new_key_expected_zero(affect_pair: list[PostgresAffectStore]) -> None:
    for r in range(ROUNDS):
        key = f"new-{r}"

        def create(i: int, key: str = key, r: int = r) -> Any:
            return affect_pair[i % 2].put_many(
                [{"key": key, "scope": {}, "writer": i}],
                idempotency_key=f"create-{r}-{i}",
                ctx=CTX,
                expected_revisions={key: 0},
            )

        results = _race(create)
        wins = [i for i, res in enumerate(results) if isinstance(res, dict)]
        losses = [res for res in results if isinstance(res, RevisionMismatch)]
        assert len(wins) == 1 and len(losses) == 7, results
        assert all(e.details == {"id": key, "expected": 0, "actual": 1} for e in losses)
        history = affect_pair[1].history(key)["items"]
        assert [(h["revision"], h["writer"]) for h in history] == [(1, wins[0])]


def test_affect_concurrent_appends_keep_every_revision(
    affect_pair: list[PostgresAffectStore],
) -> None:
    def work(i: int) -> Any:
        for n in range(5):
            affect_pair[i % 2].put_many(
                [{"key": "shared", "scope": {}, "w": i, "n": n}],
                idempotency_key=f"{i}-{n}",
                ctx=CTX,
            )
        return True

    assert _race(work) == [True] * WRITERS
    items: list[dict[str, Any]] = []
    page = affect_pair[0].history("shared", limit=500)
    items += page["items"]
    assert [h["revision"] for h in items] == list(range(WRITERS * 5, 0, -1))
    current = affect_pair[1].get("shared")
    assert current is not None
    assert current["revision"] == WRITERS * 5
