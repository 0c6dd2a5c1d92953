"""Load, loopback only and bounded: N concurrent clients for T seconds of mixed
search / upsert / get on a pre-filled memory store, spread over the combined provider
and a standalone memory-plane process serving the same file at once (a little affect
and VMP traffic rides along on the combined one). Must hold: zero 5xx, zero "database
is locked", every acknowledged write present afterwards (through both processes and
in the file), and a write acknowledged by one process visible to the other at once —
by ``get`` and by an exact ``search``. Throughput and p99 are reported.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bifrost.client import BifrostClient
from bifrost.context import DispatchContext
from bifrost.errors import BifrostError
from ratatoskr.memory import open_memory_store
from ratatoskr.provider.testing import ServerProcess
from ratatoskr.vmp import VmpError

from .support import (
    affect_client,
    base,
    check_files,
    launch,
    memory_client,
    provider_env,
    report,
    size,
    vmp_client,
)

TENANTS = 8


def seed(path: str, count: int, dim: int, rng: np.random.Generator) -> None:
    """``count`` chunks straight through the store, in batches of 1000."""
    store = open_memory_store(path, embedding_dim=dim)
    ctx = DispatchContext(actor="seed")
    for start in range(0, count, 1000):
        vectors = rng.standard_normal((min(1000, count - start), dim)).tolist()
        records = [
            {
                "id": f"seed-{start + i}",
                "embedding": vec,
                "scope": {
                    "tenant": f"t{(start + i) % TENANTS}",
                    "end_user": f"u{(start + i) % 97}",
                },
                "content": f"seeded chunk {start + i}",
            }
            for i, vec in enumerate(vectors)
        ]
        store.upsert_many(records, idempotency_key=f"seed-{start}", ctx=ctx)
    store.close()


@dataclass
class Tally:
    latencies: dict[str, list[float]] = field(default_factory=dict)
    statuses: Counter[int] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    acked: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock = threading.Lock()

    def add(self, op: str, seconds: float, status: int) -> None:
        with self.lock:
            self.latencies.setdefault(op, []).append(seconds)
            self.statuses[status] += 1


class Client(threading.Thread):
    """One caller: a tenant of its own, both processes, a fixed op mix."""

    def __init__(
        self,
        idx: int,
        servers: list[str],
        combined: ServerProcess,
        dim: int,
        seeded: int,
        until: float,
        tally: Tally,
    ) -> None:
        super().__init__(daemon=True)
        self.idx = idx
        self.tenant = f"t{idx % TENANTS}"
        self.user = f"load-{idx}"
        grant = {"tenant": self.tenant}
        self.memory = [memory_client(url, scope=grant, actor=self.user) for url in servers]
        self.affect = affect_client(base(combined, "affect"), scope=grant, actor=self.user)
        self.vmp = vmp_client(base(combined, "vmp"))
        self.dim = dim
        self.seeded = seeded
        self.until = until
        self.tally = tally
        self.rng = random.Random(idx)
        self.mine: list[str] = []

    def timed(self, op: str, call: Any) -> Any:
        start = time.perf_counter()
        try:
            result = call()
        except (BifrostError, VmpError) as exc:
            self.tally.add(op, time.perf_counter() - start, exc.status)
            self.tally.failures.append(f"{op}: {exc.status} {exc.message}")
            return None
        except Exception as exc:
            self.tally.add(op, time.perf_counter() - start, 0)
            self.tally.failures.append(f"{op}: {type(exc).__name__}")
            return None
        self.tally.add(op, time.perf_counter() - start, 200)
        return result

    def vector(self) -> list[float]:
        return [self.rng.gauss(0, 1) for _ in range(self.dim)]

    def run(self) -> None:
        n = 0
        while time.monotonic() < self.until:
            n += 1
            here, there = self.rng.sample(self.memory, 2)
            roll = self.rng.random()
            if roll < 0.55:
                scope_any = [{"end_user": f"u{self.rng.randrange(97)}"}] if roll < 0.2 else None
                self.timed(
                    "search", partial(here.search, self.vector(), top_k=10, scope_any=scope_any)
                )
            elif roll < 0.80:
                self.upsert(n, here, there)
            elif roll < 0.92:
                ids = self.rng.sample(self.mine, min(3, len(self.mine))) if self.mine else []
                ids.append(f"seed-{self.rng.randrange(self.seeded)}")
                self.timed("get_many", partial(here.get_many, ids))
            elif roll < 0.96:
                record = {"key": f"{self.user}-{n % 20}", "scope": {"tenant": self.tenant}, "n": n}
                self.timed(
                    "affect",
                    partial(self.affect.put_many, [record], idempotency_key=f"{self.user}-a{n}"),
                )
            else:
                self.timed("vmp", partial(self.vmp.search_vector, [1.0, 2.0, 3.0, 4.0], 5))

    def upsert(self, n: int, here: BifrostClient, there: BifrostClient) -> None:
        records: list[dict[str, Any]] = [
            {
                "id": f"{self.user}-{n}-{i}",
                "embedding": self.vector(),
                "scope": {"tenant": self.tenant, "end_user": self.user},
                "content": f"written under load by {self.user}",
            }
            for i in range(self.rng.randint(1, 5))
        ]
        result = self.timed(
            "upsert_many", lambda: here.upsert_many(records, idempotency_key=f"{self.user}-{n}")
        )
        if result is None:
            return
        with self.tally.lock:
            for rec in records:
                self.tally.acked[rec["id"]] = rec
        self.mine += [r["id"] for r in records]
        # Acknowledged by one process: the other sees it at once, by id and by search.
        first = records[0]
        got = self.timed("get", lambda: there.get(first["id"]))
        if got is None or got["embedding"] != first["embedding"]:
            self.tally.failures.append(
                "a write acknowledged by one process is missing in the other"
            )
        if n % 4 == 0:
            hits = self.timed(
                "search",
                lambda: there.search(
                    first["embedding"],
                    top_k=1,
                    scope_all={"end_user": self.user},
                    include={"embedding": False},
                ),
            )
            if not hits or hits[0]["chunk_id"] != first["id"]:
                self.tally.failures.append("the other process's index missed an acknowledged write")

    def close(self) -> None:
        for c in self.memory:
            c.close()
        self.affect.close()
        self.vmp.close()


def percentile(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else 0.0


def run_load(root: Path, *, clients: int, seconds: float, chunks: int, dim: int) -> dict[str, Any]:
    env = provider_env(root, RATATOSKR_MEMORY_EMBEDDING_DIM=str(dim))
    started = time.monotonic()
    seed(env["RATATOSKR_MEMORY_DB"], chunks, dim, np.random.default_rng(7))
    seeded_s = time.monotonic() - started
    combined = launch(root, env)
    standalone = launch(root, env, "--plane", "memory")
    tally = Tally()
    threads: list[Client] = []
    try:
        urls = [base(combined, "memory"), standalone.base_url]
        threads = [Client(i, urls, combined, dim, chunks, 0.0, tally) for i in range(clients)]
        t0 = time.monotonic()
        for t in threads:
            t.until = t0 + seconds
            t.start()
        for t in threads:
            t.join(seconds + 120)
        elapsed = time.monotonic() - t0
        # Every acknowledged write, through each process.
        acked = list(tally.acked)
        for url in urls:
            with memory_client(url) as reader:
                found: dict[str, Any] = {}
                for i in range(0, len(acked), 1000):
                    for rec in reader.get_many(acked[i : i + 1000]):
                        found[rec["id"]] = rec
            lost = [i for i in acked if i not in found]
            assert not lost, f"{len(lost)} acknowledged writes missing via {url}"
            for ident, rec in tally.acked.items():
                assert {k: v for k, v in found[ident].items() if k != "revision"} == rec
    finally:
        for t in threads:
            t.close()
        for s in (combined, standalone):
            s.stop()
    logs = "".join(combined.output + standalone.output)
    counts = check_files(env)
    assert counts["memory"] == chunks + len(tally.acked)
    requests = sum(tally.statuses.values())
    all_latencies = [x for xs in tally.latencies.values() for x in xs]
    figures = {
        "clients": clients,
        "seconds": round(elapsed, 1),
        "chunks": chunks,
        "dim": dim,
        "seed_seconds": round(seeded_s, 1),
        "requests": requests,
        "throughput_rps": round(requests / elapsed, 1),
        "p50_ms": round(1000 * percentile(all_latencies, 50), 1),
        "p99_ms": round(1000 * percentile(all_latencies, 99), 1),
        "p99_ms_by_op": {
            op: round(1000 * percentile(xs, 99), 1) for op, xs in sorted(tally.latencies.items())
        },
        "count_by_op": {op: len(xs) for op, xs in sorted(tally.latencies.items())},
        "acked_writes": len(tally.acked),
        "errors_5xx": sum(c for s, c in tally.statuses.items() if s >= 500),
        "other_failures": len(tally.failures),
        "database_is_locked": logs.lower().count("locked"),
        "lost": 0,
    }
    report(f"load-{'soak' if chunks >= 50_000 else 'quick'}", figures)
    assert tally.failures == [], tally.failures[:10]
    assert figures["errors_5xx"] == 0
    assert "locked" not in logs.lower()
    assert "Traceback" not in logs
    return figures


@pytest.mark.slow
def test_load_holds_without_errors_or_lost_writes(tmp_path: Path) -> None:
    run_load(
        tmp_path,
        clients=size("load_clients", 4, 16, soaking=False),
        seconds=size("load_seconds", 4, 60, soaking=False),
        chunks=size("load_chunks", 2000, 100_000, soaking=False),
        dim=size("load_dim", 16, 384, soaking=False),
    )


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_load_soak(tmp_path: Path) -> None:
    run_load(
        tmp_path,
        clients=size("load_clients", 4, 16, soaking=True),
        seconds=size("load_seconds", 4, 60, soaking=True),
        chunks=size("load_chunks", 2000, 100_000, soaking=True),
        dim=size("load_dim", 16, 384, soaking=True),
    )
