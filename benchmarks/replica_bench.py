"""One-tenant search throughput: the primary alone vs the primary + a read replica.

A throwaway primary and a synchronous standby (``synchronous_commit=remote_apply``,
``ratatoskr.postgres.cluster``), N chunks in T tenants loaded through the store's
``upsert_many``, then C client processes each running one-tenant searches
(top_k 10) through a ``PostgresMemoryStore`` for D seconds:

- ``primary``: every search on the primary;
- ``primary + replica``: the store's reads routed to the standby
  (``ReadReplica``: one flush-position look on the primary, one replay-position
  look on the standby, then the search there).

Each server's processes can be pinned to CPUs of their own (``--pin``: the
primary to CPU 0, the standby to CPU 1), so that on a small machine the replica
adds a core the way a second machine would; the clients run unpinned. Every
answer of the replica run is checked against the primary's for the same query
(ids and order), and the routing counters say how many reads the replica served.

    python benchmarks/replica_bench.py [--n 20000] [--dim 384] [--clients 4] [--seconds 8] [--pin]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from typing import Any

import numpy as np

from bifrost.context import DispatchContext
from ratatoskr.memory.postgres import open_postgres_memory_store
from ratatoskr.postgres.cluster import Node, start_pair
from ratatoskr.postgres.database import PoolOptions, open_pool
from ratatoskr.postgres.replica import ReadReplica

SCHEMA = "bench_replica"
TOP_K = 10


def _records(start: int, stop: int, dim: int, tenants: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(start)
    vecs = rng.standard_normal((stop - start, dim))
    return [
        {
            "id": f"c{i}",
            "embedding": vecs[i - start].tolist(),
            "scope": {"tenant": f"t{i % tenants}"},
            "content": f"chunk {i}",
        }
        for i in range(start, stop)
    ]


def _pin(node: Node, cpu: int) -> None:
    """The postmaster (so every backend it forks) on ``cpu``."""
    pid = node.pid
    if pid is not None:
        os.sched_setaffinity(pid, {cpu})


def _client(
    dsn: str, read_dsn: str | None, dim: int, tenants: int, seconds: float, seed: int, out: Any
) -> None:
    store = open_postgres_memory_store(
        dsn, schema=SCHEMA, embedding_dim=dim, pool_options=PoolOptions(max_size=2)
    )
    replica = None
    if read_dsn is not None:
        replica = ReadReplica(open_pool(read_dsn, PoolOptions(max_size=2)), owns_pool=True)
        store.database.use_replica(replica)
    rng = np.random.default_rng(seed)
    done = 0
    answers: list[tuple[list[float], str, list[str]]] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        q = rng.standard_normal(dim).tolist()
        tenant = f"t{int(rng.integers(tenants))}"
        hits = store.search(q, top_k=TOP_K, scope_all={"tenant": tenant})
        if len(answers) < 20:
            answers.append((q, tenant, [h["chunk_id"] for h in hits]))
        done += 1
    out.put(
        (
            done,
            answers,
            0 if replica is None else replica.served,
            0 if replica is None else replica.fell_back,
        )
    )
    store.close()


def _run(
    dsn: str, read_dsn: str | None, args: argparse.Namespace
) -> tuple[float, list[Any], int, int]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=_client,
            args=(dsn, read_dsn, args.dim, args.tenants, args.seconds, 1000 + c, out),
        )
        for c in range(args.clients)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=args.seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    total = sum(r[0] for r in results)
    answers = [a for r in results for a in r[1]]
    return total / args.seconds, answers, sum(r[2] for r in results), sum(r[3] for r in results)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--pin", action="store_true", help="primary on CPU 0, standby on CPU 1")
    args = parser.parse_args()

    with start_pair(synchronous=True, synchronous_commit="remote_apply", durable=False) as pair:
        if args.pin:
            _pin(pair.primary, 0)
            _pin(pair.standby, 1)
        dsn, read_dsn = pair.primary.dsn(), pair.standby.dsn()
        store = open_postgres_memory_store(dsn, schema=SCHEMA, embedding_dim=args.dim)
        t0 = time.monotonic()
        ctx = DispatchContext(actor="bench", verb="upsert_many")
        for b, start in enumerate(range(0, args.n, 500)):
            recs = _records(start, min(args.n, start + 500), args.dim, args.tenants)
            store.upsert_many(recs, idempotency_key=f"load-{b}", ctx=ctx)
        print(f"loaded {args.n:,} x {args.dim} in {time.monotonic() - t0:.1f} s", flush=True)

        alone, _, _, _ = _run(dsn, None, args)
        print(f"primary alone: {alone:,.0f} searches/s", flush=True)
        both, answers, served, fell_back = _run(dsn, read_dsn, args)
        print(
            f"primary + replica: {both:,.0f} searches/s "
            f"(replica served {served:,}, primary {fell_back:,})",
            flush=True,
        )
        # The replica's answers are the primary's: same ids, same order.
        for q, tenant, ids in answers:
            hits = store.search(q, top_k=TOP_K, scope_all={"tenant": tenant})
            assert [h["chunk_id"] for h in hits] == ids, "the replica answered differently"
        print(f"{len(answers)} replica answers checked against the primary: identical")
        print(f"load average: {os.getloadavg()[0]:.1f}; ratio {both / alone:.2f}x")
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
