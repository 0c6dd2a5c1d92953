"""The synchronous standby stopped under a provider: writes answer 503 in time, reads go on.

A primary and its synchronous standby (``synchronous_commit = remote_apply``: an
acknowledged write is visible on the standby), one ``ratatoskr serve`` on the
multi-host DSN with ``RATATOSKR_POSTGRES_SYNC_WAIT_S=1``. With the standby stopped:

- a write answers ``503 bifrost.unavailable`` within the bound, not acknowledged —
  although it is committed on the primary (the wait for the standby was cancelled,
  PostgreSQL keeps the local commit);
- more concurrent writers than the pool has connections answer the same way, each
  within the bound, while a bystander ``get`` answers in well under a second;
- ``/readyz`` answers quickly, 503, naming the reason;
- a retry of the timed-out write (same idempotency key) is a replay of the write the
  primary holds, and is not acknowledged either while the standby is away.

With the standby back: ``/readyz`` 200, new writes succeed, and the retry is
acknowledged as a replay — the record then on the standby.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from bifrost.client import BifrostClient
from bifrost.errors import BifrostError
from ratatoskr.postgres.cluster import Pair, start_pair
from ratatoskr.provider.testing import ServerProcess, start_serve

from .conftest import KEY

pytestmark = pytest.mark.slow
DIM = 8
GRANT = {"tenant": "acme"}
SYNC_WAIT = 1.0
# What a write may take past the bound: the cancel, the answer, a loaded machine.
SLACK = 1.5
WRITERS = 6  # more than the provider's pool of 4 connections per plane
REASON = "synchronous standby not connected"


def rec(cid: str, i: int = 0) -> dict[str, Any]:
    emb = [1.0 if d == i % DIM else 0.1 for d in range(DIM)]
    return {"id": cid, "embedding": emb, "scope": GRANT, "content": f"{cid} body"}


@pytest.fixture
def pair() -> Iterator[Pair]:
    p = start_pair(synchronous=True, synchronous_commit="remote_apply", durable=False)
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
def server(pair: Pair, tmp_path: Path) -> Iterator[ServerProcess]:
    env = {
        "RATATOSKR_MEMORY_DB": pair.dsn(),
        "RATATOSKR_AFFECT_DB": pair.dsn(),
        "RATATOSKR_VMP_DB": str(tmp_path / "vmp.db"),
        "RATATOSKR_VMP_API_KEY": "standby-vmp-key-0123456789",
        "RATATOSKR_MEMORY_EMBEDDING_DIM": str(DIM),
        "RATATOSKR_HEIMDALL_KEY": KEY,
        "RATATOSKR_POSTGRES_SYNC_WAIT_S": str(SYNC_WAIT),
        "RATATOSKR_PORT": "0",
    }
    s = start_serve(["serve"], env, tmp_path, timeout=120)
    try:
        yield s
    finally:
        s.close()


def client(base: str) -> BifrostClient:
    # The client's timeout is far above the bound: an answer, not a client giving up.
    return BifrostClient(
        f"{base}/memory", KEY.encode(), actor="agent", scope=GRANT, plane="memory", timeout=30
    )


def timed_write(base: str, cid: str, key: str) -> tuple[object, float]:
    """The write's answer (its result or the BifrostError) and how long it took."""
    t0 = time.monotonic()
    try:
        answer: object = client(base).upsert_many([rec(cid)], idempotency_key=key)
    except BifrostError as exc:
        answer = exc
    return answer, time.monotonic() - t0


def assert_unavailable(answer: object, took: float) -> None:
    assert isinstance(answer, BifrostError), f"acknowledged: {answer}"
    assert (answer.status, answer.wire_code("memory")) == (503, "bifrost.unavailable")
    assert took <= SYNC_WAIT + SLACK, took


def readyz(base: str) -> tuple[int, dict[str, Any], float]:
    t0 = time.monotonic()
    r = httpx.get(f"{base}/readyz", timeout=10)
    return r.status_code, r.json(), time.monotonic() - t0


def rows_on(dsn: str, ids: list[str]) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT chunk_id FROM ratatoskr_memory.memory_chunks WHERE chunk_id = ANY(%s)", (ids,)
        ).fetchall()
    return {str(r[0]) for r in rows}


def wait_streaming(pair: Pair, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(pair.primary.dsn(), autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"
            ).fetchone()
            if row is not None and row[0] >= 1:
                return
            time.sleep(0.05)
    raise AssertionError("the standby did not come back as synchronous")


def test_writes_answer_503_in_time_and_reads_go_on_while_the_standby_is_away(
    pair: Pair, server: ServerProcess
) -> None:
    base = server.base_url
    c = client(base)
    c.upsert_many([rec("warm")], idempotency_key="warm")
    status, body, took = readyz(base)
    assert status == 200 and took < 1.0, body

    pair.standby.stop("fast")

    # One write alone: it reaches the wait for the standby and is cut off there.
    answer, took = timed_write(base, "lone", "k-lone")
    assert_unavailable(answer, took)
    assert took >= SYNC_WAIT * 0.9  # it did wait for the standby first
    # Not acknowledged, yet committed on the primary: PostgreSQL keeps the local commit.
    assert rows_on(pair.primary.dsn(), ["lone"]) == {"lone"}

    # More writers than connections, all waiting; a bystander reads meanwhile.
    answers: dict[int, tuple[object, float]] = {}

    def write(i: int) -> None:
        answers[i] = timed_write(base, f"w{i}", f"k-w{i}")

    threads = [threading.Thread(target=write, args=(i,)) for i in range(WRITERS)]
    for t in threads:
        t.start()
    time.sleep(0.3)  # the writers hold their slots and connections now
    reads = []
    for _ in range(3):
        t0 = time.monotonic()
        got = c.get("warm")
        reads.append(time.monotonic() - t0)
        assert got is not None and got["id"] == "warm"
    status, body, took = readyz(base)
    for t in threads:
        t.join(30)
    assert max(reads) < 1.0, reads
    assert status == 503 and took < 1.0, (status, took)
    assert body["planes"]["memory"].startswith(REASON), body
    assert body["planes"]["affect"].startswith(REASON), body
    assert sorted(answers) == list(range(WRITERS))
    for answer, took in answers.values():
        assert_unavailable(answer, took)

    # The retry replays the write the primary holds: not acknowledged while the
    # standby cannot confirm it either.
    answer, took = timed_write(base, "lone", "k-lone")
    assert_unavailable(answer, took)

    pair.standby.start()
    wait_streaming(pair)
    deadline = time.monotonic() + 10
    while (status := readyz(base)[0]) != 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    status, body, took = readyz(base)
    assert status == 200 and took < 1.0, body

    assert c.upsert_many([rec("after")], idempotency_key="k-after") == {
        "upserted": 1,
        "replayed": False,
    }
    assert c.upsert_many([rec("lone")], idempotency_key="k-lone") == {
        "upserted": 1,
        "replayed": True,
    }
    # remote_apply: what was acknowledged is visible on the standby already.
    assert rows_on(pair.standby.dsn(), ["lone", "after"]) == {"lone", "after"}
