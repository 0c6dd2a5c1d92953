"""The cost of per-tenant quotas on a write: ``upsert_many`` / ``put_many`` of 100 new
records into a SQLite store already holding 10,000, with the usage triggers and the
quota check (after), and with the triggers dropped and no quota (before), in one run.

    .venv/bin/python benchmarks/quota_bench.py
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bifrost.context import DispatchContext
from bifrost.quota import NO_QUOTA, affect_quota, memory_quota
from ratatoskr.affect import open_affect_store
from ratatoskr.memory import open_memory_store

DIM, BASE, BATCH, ROUNDS = 384, 10_000, 100, 40
CTX = DispatchContext(actor="bench")
TENANTS = [f"tenant-{i}" for i in range(20)]


def chunk(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "id": f"c{i:08d}",
        "embedding": [rng.uniform(-1, 1) for _ in range(DIM)],
        "scope": {"tenant": TENANTS[i % len(TENANTS)]},
        "content": "x" * 400,
    }


def key(i: int) -> dict[str, Any]:
    return {"key": f"k{i:08d}", "scope": {"tenant": TENANTS[i % len(TENANTS)]}, "v": "y" * 400}


def timed(write: Any, make: Any, start: int) -> list[float]:
    out = []
    for r in range(ROUNDS):
        batch = [make(start + r * BATCH + j) for j in range(BATCH)]
        t0 = time.perf_counter()
        write(batch, f"w{start}-{r}")
        out.append((time.perf_counter() - t0) * 1000)
    return out


def run(plane: str, tmp: Path) -> None:
    rng = random.Random(1)
    for mode in ("before", "after"):
        path = str(tmp / f"{plane}-{mode}.db")
        if plane == "memory":
            store: Any = open_memory_store(
                path,
                embedding_dim=DIM,
                quota=memory_quota(10**6, 4 << 30) if mode == "after" else NO_QUOTA,
            )

            def write(b: list[dict[str, Any]], k: str, s: Any = store) -> None:
                s.upsert_many(b, idempotency_key=k, ctx=CTX)

            def make(i: int) -> dict[str, Any]:
                return chunk(rng, i)

            table = "memory_quota"
        else:
            store = open_affect_store(
                path, quota=affect_quota(10**6, 4 << 30) if mode == "after" else NO_QUOTA
            )

            def write(b: list[dict[str, Any]], k: str, s: Any = store) -> None:
                s.put_many(b, idempotency_key=k, ctx=CTX)

            make = key
            table = "affect_quota"
        if mode == "before":  # the write path without the usage triggers
            with store.database.write() as conn:
                for event in ("insert", "update", "delete"):
                    conn.execute(f"DROP TRIGGER {table}_{event}")
        for start in range(0, BASE, 1000):
            write([make(start + j) for j in range(1000)], f"fill-{start}")
        ms = timed(write, make, BASE)
        print(
            f"{plane:6} {mode:6} {BATCH} new records into {BASE}: median"
            f" {statistics.median(ms):.2f} ms, p90 {sorted(ms)[int(0.9 * len(ms))]:.2f} ms"
        )
        store.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        for p in ("memory", "affect"):
            run(p, Path(d))
