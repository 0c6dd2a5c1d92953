"""Narrow scopes: the store's search against numpy's per-scope floor, CPU per call.

At N chunks × 384 dims (100 tenants × 10 end users in 10 groups, as
``index_bench.py`` makes them), top_k = 10, one query at a time, three scopes:

- ``10%``: one group (``scope_all={"group": ...}``);
- ``1%``: one tenant;
- ``0.1%``: one tenant's end user (``{"tenant", "end_user"}``).

For each query and scope, in one process and interleaved (the order rotated query
by query, so load on the host falls on every call alike), three calls are timed as
CPU time of the calling thread (``time.thread_time``; wall p50s beside them):

- ``store``: ``store.search(vector, top_k=10, scope_all=..., include={"embedding":
  False})`` on a file store opened in this process (the store API, as compare.py's
  "ratatoskr (store API)" calls it);
- ``numpy_scope``: numpy's per-scope floor as memory_bench.py measures it (gather
  the scope's rows of the float32 unit matrix, product, argpartition top 10, sort);
- ``numpy_block``: the same over the scope's rows gathered beforehand (contiguous).

Every store answer is checked against a float64 brute force over the scope's rows
(ids and order, ties by chunk_id): recall is reported and must be 1.000.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/scope_bench.py [--n 100000]
        [--queries 300] [--db /tmp/scope_bench.db] [--json out.json]
        [--profile 0.1%]   # then cProfile of the store's search at that scope

``--db`` keeps the built store (reused when it exists and holds N chunks), so an A/B
of two source trees runs against the same file: put the other tree's
``packages/memory/src`` first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from index_bench import DIM, TENANTS, TOP_K, USERS, Data, queries

from bifrost.context import DispatchContext
from ratatoskr.memory import open_memory_store
from ratatoskr.memory.records import exact_scores, unit_float64
from ratatoskr.memory.store import SqliteMemoryStore

SCOPES = ("10%", "1%", "0.1%")
CALLS = ("store", "numpy_scope", "numpy_block")
GROUP_OF = 10  # tenants per group (index_bench.py's scopes: group = tenant // 10)


class _Widened:
    """``raw64[i]`` of a :class:`LeanData`: rows widened from float32 when read."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def __getitem__(self, rows: Any) -> Any:
        return self._raw[rows].astype(np.float64)


class LeanData(Data):
    """index_bench.py's :class:`Data` (the same rows and scopes) without its float64
    copies of the whole matrix: 1M × 384 in ~3 GB instead of ~9."""

    def _derive(self) -> None:
        n = self.raw.shape[0]
        self.unit32 = np.empty((n, DIM), dtype=np.float32)
        for start in range(0, n, 8192):
            m = self.raw[start : start + 8192].astype(np.float64)
            m = m / np.max(np.abs(m), axis=1, keepdims=True)
            self.unit32[start : start + 8192] = m / np.linalg.norm(m, axis=1, keepdims=True)
        self.raw64 = _Widened(self.raw)  # type: ignore[assignment]


def scope_of(name: str, t: int, u: int) -> dict[str, str]:
    if name == "10%":
        return {"group": f"g{t // GROUP_OF}"}
    if name == "1%":
        return {"tenant": f"t{t:03d}"}
    return {"tenant": f"t{t:03d}", "end_user": f"u{u}"}


def rows_of(data: Data, name: str, t: int, u: int) -> Any:
    if name == "10%":
        mask = data.tenant // GROUP_OF == t // GROUP_OF
    elif name == "1%":
        mask = data.tenant == t
    else:
        mask = (data.tenant == t) & (data.user == u)
    return np.nonzero(mask)[0]


def build(data: Data, path: str) -> SqliteMemoryStore:
    """The store at ``path`` holding ``data`` (written unless it already holds it)."""
    n = data.raw.shape[0]
    store = open_memory_store(path, embedding_dim=DIM, max_batch=1000)
    if store.count() == n:
        return store
    ctx = DispatchContext(actor="bench", plane="memory", verb="upsert_many")
    for start in range(0, n, 1000):
        batch = [
            {
                "id": data.ids[i],
                "embedding": data.raw[i].tolist(),
                "scope": data.scopes[i],
                "content": f"turn {i}",
            }
            for i in range(start, min(n, start + 1000))
        ]
        store.upsert_many(batch, idempotency_key=f"b{start}", ctx=ctx)
    return store


def brute(matrix: Any, q32: Any) -> Any:
    scores = matrix @ q32
    top = np.argpartition(-scores, TOP_K - 1)[:TOP_K]
    return top[np.argsort(-scores[top])]


def gathered(matrix: Any, rows: Any, q32: Any) -> Any:
    return brute(matrix[rows], q32)


def truth(data: Data, rows: Any, q64: Any) -> list[str]:
    """Float64 brute force over ``rows``: score desc, then chunk_id."""
    scores = exact_scores(data.raw64[rows], q64)
    order = sorted(zip((-scores).tolist(), (data.ids[int(i)] for i in rows), strict=True))
    return [cid for _, cid in order[:TOP_K]]


def cases(data: Data, nq: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(11)
    out = []
    for q in queries(data, nq, seed=12):
        t, u = int(rng.integers(0, TENANTS)), int(rng.integers(0, USERS))
        q64 = unit_float64(q)
        out.append(
            {
                "vector": q.tolist(),
                "q64": q64,
                "q32": q64.astype(np.float32),
                "scopes": {s: scope_of(s, t, u) for s in SCOPES},
                "rows": {s: rows_of(data, s, t, u) for s in SCOPES},
            }
        )
    return out


def run(store: SqliteMemoryStore, data: Data, work: list[dict[str, Any]]) -> dict[str, Any]:
    unit32 = data.unit32
    cpu: dict[str, dict[str, list[float]]] = {s: {c: [] for c in CALLS} for s in SCOPES}
    wall: dict[str, dict[str, list[float]]] = {s: {c: [] for c in CALLS} for s in SCOPES}
    answers: dict[str, list[list[str]]] = {s: [] for s in SCOPES}
    for case in work[:20]:  # warm: statements prepared, filter caches filled
        for s in SCOPES:
            store.search(case["vector"], top_k=TOP_K, scope_all=case["scopes"][s])
    gc.collect()
    gc.freeze()
    for j, case in enumerate(work):
        for s in SCOPES:
            rows = case["rows"][s]
            # Gathered before the timed calls and dropped after them (at 1M a group's
            # block is 150 MB: one per query would not fit).
            block = np.ascontiguousarray(unit32[rows])
            calls: dict[str, Callable[[], Any]] = {
                "store": partial(
                    store.search,
                    case["vector"],
                    top_k=TOP_K,
                    scope_all=case["scopes"][s],
                    include={"embedding": False},
                ),
                "numpy_scope": partial(gathered, unit32, rows, case["q32"]),
                "numpy_block": partial(brute, block, case["q32"]),
            }
            shift = j % len(CALLS)
            for name in CALLS[shift:] + CALLS[:shift]:
                w0, c0 = time.perf_counter(), time.thread_time()
                value = calls[name]()
                c1, w1 = time.thread_time(), time.perf_counter()
                cpu[s][name].append(c1 - c0)
                wall[s][name].append(w1 - w0)
                if name == "store":
                    answers[s].append([h["chunk_id"] for h in value])
    gc.unfreeze()
    out: dict[str, Any] = {}
    for s in SCOPES:
        exact = recall = 0.0
        for case, got in zip(work, answers[s], strict=True):
            want = truth(data, case["rows"][s], case["q64"])
            exact += got == want
            recall += len(set(got) & set(want)) / len(want)
        p50c = {c: statistics.median(ts) * 1e3 for c, ts in cpu[s].items()}
        p50w = {c: statistics.median(ts) * 1e3 for c, ts in wall[s].items()}
        out[s] = {
            "rows": int(statistics.median(case["rows"][s].size for case in work)),
            "cpu_p50_ms": p50c,
            "wall_p50_ms": p50w,
            "store_over_numpy_scope_cpu": p50c["store"] / p50c["numpy_scope"],
            "store_over_numpy_block_cpu": p50c["store"] / p50c["numpy_block"],
            "recall": recall / len(work),
            "exact_answers": f"{int(exact)}/{len(work)}",
        }
    return out


def profile(store: SqliteMemoryStore, work: list[dict[str, Any]], scope: str) -> None:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5):
        for case in work:
            store.search(
                case["vector"],
                top_k=TOP_K,
                scope_all=case["scopes"][scope],
                include={"embedding": False},
            )
    prof.disable()
    stats = pstats.Stats(prof, stream=sys.stderr)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(40)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--db", type=str, default=None, help="keep (and reuse) the store here")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--profile", choices=SCOPES, default=None)
    args = parser.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    data = LeanData(args.n)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or str(Path(tmp) / "scope_bench.db")
        store = build(data, path)
        try:
            work = cases(data, args.queries)
            if args.profile is not None:
                profile(store, work, args.profile)
                return
            result = {"n": args.n, "queries": args.queries, "scopes": run(store, data, work)}
        finally:
            store.close()
    text = json.dumps(result, indent=2)
    print(text)
    for s, r in result["scopes"].items():
        c = r["cpu_p50_ms"]
        print(
            f"{s:>5} ({r['rows']:,} rows): store {c['store']:.3f} ms CPU, numpy floor"
            f" {c['numpy_scope']:.3f} ({r['store_over_numpy_scope_cpu']:.2f}x), block"
            f" {c['numpy_block']:.3f} ({r['store_over_numpy_block_cpu']:.2f}x);"
            f" recall {r['recall']:.3f}, exact {r['exact_answers']}",
            file=sys.stderr,
        )
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
