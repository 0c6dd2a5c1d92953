"""PostgreSQL that survives losing its machine: failover under write load, over real HTTP.

A primary and a streaming standby (``ratatoskr.postgres.cluster``, the pinned
wheel's binaries), two ``ratatoskr serve`` processes with memory and affect on
the multi-host DSN (``target_session_attrs=read-write``), four writer threads
(two per provider) sending ``upsert_many`` batches. Then, mid-load:

1. the primary's WAL sender is stopped (SIGSTOP) for a moment — the standby
   falls behind, as over a link that stalls — while the writers go on;
2. the primary's postmaster and the stalled sender get SIGKILL (the machine is
   gone: nothing flushed, nothing handed over), the standby is promoted;
3. the writers keep writing through the same providers, never restarted.

Synchronous standby (``synchronous_standby_names='*'``, ``synchronous_commit=on``,
and the providers started with ``RATATOSKR_POSTGRES_REQUIRE_SYNC_STANDBY``): while
the standby lags, no write is acknowledged; every acknowledged batch is on the
new primary (lost = 0), no batch is partial, a retry of an unanswered batch is a
replay exactly when it had committed, calls cut off answer ``503
bifrost.unavailable`` (or lose their connection), tokens used before the
failover are still refused, and each provider's first write after the promotion
is timed (target: ≤ 5 s).

Asynchronous standby: the primary acknowledges what the standby never received,
and the failover loses it — the batches acknowledged while the standby lagged
are gone (counted; docs/scaling.md and docs/reliability.md say so).

Figures go to the test's output (``-s``) and to docs/reliability.md by hand.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
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
from .test_single_use import GRANT, Captured, refused_as_replay

pytestmark = pytest.mark.slow
DIM = 8
BATCH = 10
LAG = 0.6  # seconds the standby's receiver is stopped before the kill
WINDOW_TARGET = 5.0


@dataclass
class Writer:
    """A client thread writing batches through one provider until told to stop."""

    base: str
    name: str
    acked: list[int] = field(default_factory=list)
    acked_at: list[float] = field(default_factory=list)
    unknown: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def ids(self, b: int) -> list[str]:
        return [f"{self.name}-b{b}-{i}" for i in range(BATCH)]

    def key(self, b: int) -> str:
        return f"{self.name}-b{b}"

    def records(self, b: int) -> list[dict[str, Any]]:
        return [
            {"id": c, "embedding": emb(b + i), "scope": GRANT, "content": f"{c} body"}
            for i, c in enumerate(self.ids(b))
        ]

    def run(self, stop: threading.Event) -> None:
        http = httpx.Client(base_url=f"{self.base}/memory", timeout=30)
        c = BifrostClient(
            "", KEY.encode(), actor="agent", scope=GRANT, plane="memory", http_client=http
        )
        b = 0
        try:
            while not stop.is_set():
                try:
                    result = c.upsert_many(self.records(b), idempotency_key=self.key(b))
                except BifrostError as exc:
                    self.unknown.append(b)
                    self.errors.append(f"{exc.status} {exc.wire_code('memory')}")
                    time.sleep(0.02)
                except httpx.HTTPError as exc:
                    self.unknown.append(b)
                    self.errors.append(type(exc).__name__)
                    time.sleep(0.02)
                else:
                    if result != {"upserted": BATCH, "replayed": False}:
                        self.errors.append(f"unexpected result {result}")
                        return
                    self.acked.append(b)
                    self.acked_at.append(time.monotonic())
                b += 1
        finally:
            http.close()

    def first_ack_after(self, t: float) -> float | None:
        return next((a for a in self.acked_at if a > t), None)


def emb(i: int) -> list[float]:
    return [1.0 if d == i % DIM else 0.1 * ((i // DIM) % 7 + 1) for d in range(DIM)]


def provider(dsn: str, home: Path, *, require_sync: bool) -> ServerProcess:
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "RATATOSKR_MEMORY_DB": dsn,
        "RATATOSKR_AFFECT_DB": dsn,
        "RATATOSKR_VMP_DB": str(home / "vmp.db"),
        "RATATOSKR_VMP_API_KEY": "failover-vmp-key-0123456789",
        "RATATOSKR_MEMORY_EMBEDDING_DIM": str(DIM),
        "RATATOSKR_HEIMDALL_KEY": KEY,
        "RATATOSKR_POSTGRES_REQUIRE_SYNC_STANDBY": "true" if require_sync else "false",
        "RATATOSKR_PORT": "0",
    }
    return start_serve(["serve"], env, home, timeout=120)


@dataclass
class Outcome:
    """What one failover round measured."""

    acked: int
    lost: int
    lost_while_lagging: int
    acked_while_lagging: int
    unknown: int
    windows: list[float]
    promote_s: float
    errors: set[str]


def _sender_pid(pair: Pair) -> int:
    with psycopg.connect(pair.primary.dsn(), autocommit=True) as conn:
        row = conn.execute("SELECT pid FROM pg_stat_replication").fetchone()
    assert row is not None, "the primary has no WAL sender"
    return int(row[0])


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> Iterator[Pair]:
    pair = start_pair(synchronous=bool(request.param), durable=False)
    try:
        yield pair
    finally:
        pair.close()


def failover_round(pair: Pair, home: Path) -> tuple[Outcome, list[Writer], list[str]]:
    """Load, lag, kill, promote, load again (see the module docstring); returns the
    figures, the writers and the providers' base URLs (already stopped)."""
    dsn = pair.dsn()
    servers = [provider(dsn, home / n, require_sync=pair.synchronous) for n in ("one", "two")]
    stop = threading.Event()
    tag = uuid.uuid4().hex[:6]
    writers = [Writer(s.base_url, f"{tag}-{i}-{n}") for i, s in enumerate(servers) for n in (0, 1)]
    threads = [threading.Thread(target=w.run, args=(stop,)) for w in writers]
    used = Captured(
        "memory",
        "upsert_many",
        {"records": Writer(servers[0].base_url, f"{tag}-token").records(0)},
        key=f"{tag}-token",
    )
    try:
        assert used.send(f"{servers[0].base_url}/memory").status_code == 200
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while min(len(w.acked) for w in writers) < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert min(len(w.acked) for w in writers) >= 5, [w.errors for w in writers]

        # The primary stops sending WAL (as over a link that stalls), then its
        # machine is gone: the postmaster and the stalled sender both SIGKILLed.
        sender = _sender_pid(pair)
        os.kill(sender, signal.SIGSTOP)
        lag_start = time.monotonic()
        try:
            time.sleep(LAG)
            pair.primary.kill()
            kill_at = time.monotonic()
        finally:
            os.kill(sender, signal.SIGKILL)
        time.sleep(0.3)  # the time an operator or Patroni takes to decide, at the least
        promote_at = time.monotonic()
        pair.standby.promote()
        promote_s = time.monotonic() - promote_at

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(
            len([a for a in w.acked_at if a > promote_at]) >= 3 for w in writers
        ):
            time.sleep(0.02)
        stop.set()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)

        # A token used before the failover is still refused after it, at either provider.
        refused_as_replay(used.send(f"{servers[1].base_url}/memory"))
        refused_as_replay(used.send(f"{servers[0].base_url}/memory"))
    finally:
        stop.set()
        for s in servers:
            s.close()

    present = _present(pair, [c for w in writers for b in w.acked + w.unknown for c in w.ids(b)])
    lost = lost_lagging = acked_lagging = 0
    for w in writers:
        for b, at in zip(w.acked, w.acked_at, strict=True):
            n = sum(c in present for c in w.ids(b))
            assert n in (0, BATCH), (w.name, b, n)  # never a partial batch
            # (An answer already on its way when the sender stopped is not counted.)
            lagging = lag_start + 0.1 <= at <= kill_at
            acked_lagging += lagging
            if n == 0:
                lost += 1
                lost_lagging += lagging
    windows = []
    for i in range(len(servers)):
        firsts = [w.first_ack_after(promote_at) for w in writers[2 * i : 2 * i + 2]]
        got = [f for f in firsts if f is not None]
        assert got, f"provider {i} wrote nothing after the promotion"
        windows.append(min(got) - promote_at)
    outcome = Outcome(
        acked=sum(len(w.acked) for w in writers),
        lost=lost,
        lost_while_lagging=lost_lagging,
        acked_while_lagging=acked_lagging,
        unknown=sum(len(w.unknown) for w in writers),
        windows=windows,
        promote_s=promote_s,
        errors={e for w in writers for e in w.errors},
    )
    print(f"\nfailover ({'sync' if pair.synchronous else 'async'}): {outcome}")
    return outcome, writers, [s.base_url for s in servers]


def _present(pair: Pair, ids: list[str]) -> set[str]:
    """The chunk ids among ``ids`` stored on the new primary (read directly)."""
    with psycopg.connect(pair.standby.dsn(), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT chunk_id FROM ratatoskr_memory.memory_chunks WHERE chunk_id = ANY(%s)",
            (ids,),
        ).fetchall()
    return {str(r[0]) for r in rows}


@pytest.mark.parametrize("cluster", [True], indirect=True, ids=["synchronous"])
def test_failover_to_a_synchronous_standby_loses_no_acknowledged_write(
    cluster: Pair, tmp_path: Path
) -> None:
    outcome, writers, _ = failover_round(cluster, tmp_path)
    assert outcome.lost == 0
    # While the standby lagged nothing could be acknowledged (commits waited for it).
    assert outcome.acked_while_lagging == 0
    assert outcome.unknown >= 1  # the writes in flight at the kill were cut off
    # Cut-off calls: a typed, retryable 503, or the connection dropped mid-answer.
    assert outcome.errors <= {"503 bifrost.unavailable", "ReadTimeout", "RemoteProtocolError"}
    assert all(w <= WINDOW_TARGET for w in outcome.windows), outcome.windows

    # Retries settle every unanswered batch: a replay exactly when it had committed.
    server = provider(cluster.dsn(), tmp_path / "retry", require_sync=False)
    try:
        c = BifrostClient(
            f"{server.base_url}/memory", KEY.encode(), actor="agent", scope=GRANT, plane="memory"
        )
        for w in writers:
            for b in w.unknown:
                present = len(c.get_many(w.ids(b)))
                assert present in (0, BATCH)
                retry = c.upsert_many(w.records(b), idempotency_key=w.key(b))
                assert retry == {"upserted": BATCH, "replayed": present == BATCH}
                assert len(c.get_many(w.ids(b))) == BATCH
    finally:
        server.close()


@pytest.mark.parametrize("cluster", [False], indirect=True, ids=["asynchronous"])
def test_failover_to_an_asynchronous_standby_loses_what_it_had_not_received(
    cluster: Pair, tmp_path: Path
) -> None:
    outcome, _, _ = failover_round(cluster, tmp_path)
    # The primary acknowledged writes while the standby lagged: they are gone.
    assert outcome.acked_while_lagging >= 1
    assert outcome.lost_while_lagging >= 1
    assert all(w <= WINDOW_TARGET for w in outcome.windows), outcome.windows
    docs = (Path(__file__).parents[1] / "docs" / "scaling.md").read_text()
    assert "asynchronous standby loses" in docs
