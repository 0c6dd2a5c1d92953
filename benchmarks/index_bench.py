"""The memory plane's in-memory index against numpy, side by side in one run.

At N chunks × 384 dims (100 tenants × 10 end users, rows of a tenant interleaved
with everyone else's as they arrive; clustered vectors, queries a stored vector
plus noise or a random direction), top_k = 10, one query at a time, the calls of
each query interleaved so machine noise hits all alike:

- ``index``: ratatoskr's :class:`~ratatoskr.memory.index.VectorIndex` (int8 pass,
  residual re-score) plus the exact float64 re-rank of its candidates the store
  does (here from an in-memory array, so SQLite is not in the figure);
- ``numpy``: float32 brute force (matrix-vector product, argpartition, sort);
- ``numpy_scope``: numpy's per-scope floor as ``memory_bench.py`` measures it
  (gather the in-scope rows, product, argpartition);
- ``numpy_block``: the same over a pre-gathered contiguous block of the scope
  (no gather: the least numpy can do);

for three filters: unfiltered, one tenant (1%), tenant + end user (0.1%). Every
index answer is checked against a float64 brute force over the in-scope rows
(recall and order, ties by chunk_id). Then a file store is written (its search
p50s in the writing process) and closed, which leaves its index sidecar current;
two fresh processes serve it: the first one's peak RSS (``VmHWM``) after every
mode, the second's Pss and private pages while the first still maps the sidecar
(what an extra worker costs), then ``store.search`` end to end (as compare.py's
"ratatoskr (store API)" calls it) beside ``numpy_scope`` in the same process,
interleaved, as ratios. Last, reopens in fresh processes: open → first search,
after deleting the sidecar (a rebuild from SQLite) and then mapping it.

    .venv/bin/python benchmarks/index_bench.py            # N = 100k
    .venv/bin/python benchmarks/index_bench.py --quick    # N = 10k
    .venv/bin/python benchmarks/index_bench.py --no-store # the in-memory part only
    .venv/bin/python benchmarks/index_bench.py --n 1000000 --only-mapped
        # + the index alone mapped from a sidecar in fresh processes, its pages given
        #   back after reads (ratatoskr.memory.residency) or kept: peak RSS and CPU p50
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bifrost.context import DispatchContext
from ratatoskr.memory import open_memory_store, sidecar
from ratatoskr.memory.index import VectorIndex, scope_items
from ratatoskr.memory.records import exact_scores, unit_float64
from ratatoskr.memory.residency import BUDGET

TOP_K = 10
DIM = 384
TENANTS, USERS = 100, 10
F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
MODES = ("unfiltered", "tenant", "user")


class Data:
    """Deterministic clustered rows (as memory_bench.py makes them) and their scopes."""

    def __init__(self, n: int, seed: int = 1) -> None:
        rng = np.random.default_rng(seed)
        centres = rng.standard_normal((max(n // 50, 1), DIM))
        assign = rng.integers(0, centres.shape[0], n)
        self.raw = np.empty((n, DIM), dtype=np.float32)
        for start in range(0, n, 8192):
            stop = min(n, start + 8192)
            block = centres[assign[start:stop]] + rng.standard_normal((stop - start, DIM))
            self.raw[start:stop] = block / np.sqrt(DIM)
        self._derive()
        self.tenant = np.arange(n) % TENANTS
        self.user = (np.arange(n) // TENANTS) % USERS
        self.ids = [f"chunk-{i:07d}" for i in range(n)]
        self.scopes = [
            {
                "group": f"g{int(self.tenant[i]) // 10}",
                "tenant": f"t{int(self.tenant[i]):03d}",
                "end_user": f"u{int(self.user[i])}",
            }
            for i in range(n)
        ]

    def _derive(self) -> None:
        """``raw64`` and ``unit32`` from ``raw`` (each row scaled by its largest element,
        then normalised, as the stores do)."""
        self.raw64 = self.raw.astype(np.float64)
        m = self.raw64 / np.max(np.abs(self.raw64), axis=1, keepdims=True)
        self.unit32 = (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float32)

    def rows(self, mode: str, t: int, u: int) -> I64 | None:
        if mode == "unfiltered":
            return None
        mask = self.tenant == t
        if mode == "user":
            mask &= self.user == u
        out: I64 = np.nonzero(mask)[0]
        return out

    def scope(self, mode: str, t: int, u: int) -> dict[str, str]:
        if mode == "unfiltered":
            return {}
        if mode == "tenant":
            return {"tenant": f"t{t:03d}"}
        return {"tenant": f"t{t:03d}", "end_user": f"u{u}"}


def queries(data: Data, count: int, seed: int = 2) -> list[F64]:
    """80% a stored vector plus noise, 20% random directions."""
    rng = np.random.default_rng(seed)
    out: list[F64] = []
    for j in range(count):
        if j % 5 == 4:
            out.append(rng.standard_normal(DIM))
        else:
            base = data.raw64[int(rng.integers(0, data.raw.shape[0]))]
            noise = rng.standard_normal(DIM) * (np.linalg.norm(base) / np.sqrt(DIM))
            out.append(base + 0.1 * noise)
    return out


def brute(matrix: F32, q: F32) -> I64:
    scores = matrix @ q
    top = np.argpartition(-scores, TOP_K - 1)[:TOP_K]
    out: I64 = top[np.argsort(-scores[top])]
    return out


def gathered(matrix: F32, rows: I64, q: F32) -> I64:
    return brute(matrix[rows], q)


def ours(
    index: VectorIndex, at: dict[str, int], data: Data, q32: F32, q64: F64, scope: dict[str, str]
) -> list[str]:
    """The index's candidates, re-ranked exactly as the store does."""
    found = index.nearest(q32, TOP_K, index.classes_in_scope(scope, []))
    ids = [c.chunk_id for c in found]
    scores = exact_scores([data.raw64[at[c]] for c in ids], q64)
    return [c for _, c in sorted(zip((-scores).tolist(), ids, strict=True))[:TOP_K]]


def truth(data: Data, rows: I64 | None, q64: F64) -> list[str]:
    """Float64 brute force over the in-scope rows: score desc, then chunk_id."""
    picked = np.arange(data.raw.shape[0]) if rows is None else rows
    scores = exact_scores([data.raw64[int(i)] for i in picked], q64)
    order = sorted(zip((-scores).tolist(), (data.ids[int(i)] for i in picked), strict=True))
    return [cid for _, cid in order[:TOP_K]]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def index_section(data: Data, nq: int) -> dict[str, Any]:
    n = data.raw.shape[0]
    index = VectorIndex(DIM)
    load_s, _ = timed(
        lambda: index.load_units(data.ids, data.unit32, [scope_items(s) for s in data.scopes])
    )
    at = {cid: i for i, cid in enumerate(data.ids)}
    rng = np.random.default_rng(3)
    blocks: dict[tuple[str, int, int], F32] = {}
    times: dict[str, dict[str, list[float]]] = {m: {} for m in MODES}
    candidates: dict[str, list[int]] = {m: [] for m in MODES}
    exact = {m: 0 for m in MODES}
    for j, q in enumerate(queries(data, nq)):
        q64 = unit_float64(q)
        q32 = q64.astype(np.float32)
        t, u = int(rng.integers(0, TENANTS)), int(rng.integers(0, USERS))
        for mode in MODES:
            rows = data.rows(mode, t, u)
            scope = data.scope(mode, t, u)

            calls: dict[str, Callable[[], Any]] = {
                "index": partial(ours, index, at, data, q32, q64, scope),
                "numpy": partial(brute, data.unit32, q32),
            }
            if rows is not None:
                key = (mode, t, u)
                if key not in blocks:
                    blocks[key] = np.ascontiguousarray(data.unit32[rows])
                calls["numpy_scope"] = partial(gathered, data.unit32, rows, q32)
                calls["numpy_block"] = partial(brute, blocks[key], q32)
            names = list(calls)
            for name in names[j % len(names) :] + names[: j % len(names)]:
                elapsed, value = timed(calls[name])
                times[mode].setdefault(name, []).append(elapsed)
                if name == "index":
                    exact[mode] += value == truth(data, rows, q64)
            candidates[mode].append(
                len(index.nearest(q32, TOP_K, index.classes_in_scope(scope, [])))
            )
    out: dict[str, Any] = {"n": n, "queries": nq, "load_units_s": load_s, "modes": {}}
    for mode in MODES:
        p50s = {name: statistics.median(ts) for name, ts in times[mode].items()}
        out["modes"][mode] = {
            "p50_ms": {k: v * 1e3 for k, v in p50s.items()},
            "ratio_to_numpy": p50s["index"] / p50s["numpy"],
            "ratio_to_numpy_scope": p50s["index"] / p50s["numpy_scope"]
            if "numpy_scope" in p50s
            else None,
            "ratio_to_numpy_block": p50s["index"] / p50s["numpy_block"]
            if "numpy_block" in p50s
            else None,
            "exact_answers": f"{exact[mode]}/{nq}",
            "mean_candidates": statistics.mean(candidates[mode]),
        }
    return out


_CHILD = """
import json, sys, time
t0 = time.perf_counter()
from ratatoskr.memory import open_memory_store
t1 = time.perf_counter()
store = open_memory_store(sys.argv[1], embedding_dim=int(sys.argv[2]))
t2 = time.perf_counter()
store.search(json.loads(sys.argv[3]), top_k=10)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "open_s": t2 - t1, "first_search_s": t3 - t2,
                  "open_to_first_search_s": t3 - t1}))
"""


_SERVE = """
import json, statistics, sys, time
import numpy as np
from ratatoskr.memory import open_memory_store

def memory():
    out = {}
    for name in ("status", "smaps_rollup"):
        for line in open(f"/proc/self/{name}"):
            key = line.split(":")[0]
            if key in ("VmHWM", "VmRSS", "Pss", "Private_Clean", "Private_Dirty", "Shared_Clean"):
                out[key + "_mb"] = round(int(line.split()[1]) / 1024, 1)
    return out

def brute(matrix, q):
    scores = matrix @ q
    top = np.argpartition(-scores, 9)[:10]
    return top[np.argsort(-scores[top])]

path, dim, work, hold = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
cases = json.load(open(work + "/cases.json"))
t0 = time.perf_counter()
store = open_memory_store(path, embedding_dim=dim)
open_s = time.perf_counter() - t0
for case in cases:  # serve: every mode, the store alone in the process
    for scope in case["scopes"].values():
        store.search(case["q"], top_k=10, scope_all=scope or None, include={"embedding": False})
print(json.dumps({"open_s": open_s, "serving": memory()}), flush=True)
time.sleep(hold)
# Then the store side by side with numpy's per-scope floor (gather the in-scope
# rows of the float32 matrix, product, argpartition), interleaved query by query.
unit32 = np.load(work + "/unit32.npy", mmap_mode="r")
times = {}
for j, case in enumerate(cases * 3):
    q32 = np.asarray(case["q32"], dtype=np.float32)
    for mode in ("tenant", "user"):
        rows = np.asarray(case["rows"][mode], dtype=np.int64)
        calls = {
            "store": lambda: store.search(case["q"], top_k=10, scope_all=case["scopes"][mode],
                                          include={"embedding": False}),
            "numpy_scope": lambda: brute(unit32[rows], q32),
        }
        for name in (list(calls) if j % 2 else list(calls)[::-1]):
            a = time.perf_counter()
            calls[name]()
            times.setdefault(mode, {}).setdefault(name, []).append(time.perf_counter() - a)
out = {}
for mode, by in times.items():
    p50 = {name: statistics.median(ts) for name, ts in by.items()}
    out[mode] = {"p50_ms": {k: v * 1e3 for k, v in p50.items()},
                 "ratio_to_numpy_scope": p50["store"] / p50["numpy_scope"]}
print(json.dumps({"search": out}), flush=True)
"""


def serve_section(data: Data, nq: int, path: str, workdir: Path) -> dict[str, Any]:
    """Two fresh processes serving the file: the first one's peak RSS and its store
    p50s beside numpy's per-scope floor; the second's, opened while the first still
    holds the sidecar mapped (its Pss and private pages: what an extra worker costs)."""
    np.save(workdir / "unit32.npy", data.unit32)
    rng = np.random.default_rng(7)
    cases = []
    for q in queries(data, nq, seed=8):
        t, u = int(rng.integers(0, TENANTS)), int(rng.integers(0, USERS))
        q64 = unit_float64(q)
        cases.append(
            {
                "q": q.tolist(),
                "q32": q64.astype(np.float32).tolist(),
                "scopes": {m: data.scope(m, t, u) for m in MODES},
                "rows": {m: data.rows(m, t, u).tolist() for m in ("tenant", "user")},  # type: ignore[union-attr]
            }
        )
    (workdir / "cases.json").write_text(json.dumps(cases))
    argv = [sys.executable, "-c", _SERVE, path, str(DIM), str(workdir)]
    first = subprocess.Popen([*argv, "30"], stdout=subprocess.PIPE, text=True)
    assert first.stdout is not None
    first_serving = json.loads(first.stdout.readline())
    second = subprocess.run([*argv, "0"], check=True, capture_output=True, text=True)
    second_lines = [json.loads(line) for line in second.stdout.splitlines()]
    first.terminate()
    first.wait()
    return {
        "first_worker": first_serving,
        "second_worker": second_lines[0],
        "store_vs_numpy_scope": second_lines[1]["search"],
    }


def store_section(data: Data, nq: int, workdir: Path) -> dict[str, Any]:
    path = str(workdir / "index_bench.db")
    store = open_memory_store(path, embedding_dim=DIM, max_batch=1000)
    ctx = DispatchContext(actor="bench", plane="memory", verb="upsert_many")
    n = data.raw.shape[0]
    write_s = 0.0
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
        elapsed, _ = timed(partial(store.upsert_many, batch, idempotency_key=f"b{start}", ctx=ctx))
        write_s += elapsed
    rng = np.random.default_rng(4)
    times: dict[str, list[float]] = {m: [] for m in MODES}
    for q in queries(data, nq, seed=5):
        t, u = int(rng.integers(0, TENANTS)), int(rng.integers(0, USERS))
        vector = q.tolist()
        for mode in MODES:
            scope = data.scope(mode, t, u)
            elapsed, _ = timed(
                partial(
                    store.search,
                    vector,
                    top_k=TOP_K,
                    scope_all=scope or None,
                    include={"embedding": False},
                )
            )
            times[mode].append(elapsed)
    close_s, _ = timed(store.close)  # leaves the sidecar current (no rebuild at reopen)
    serve = serve_section(data, nq, path, workdir)
    reopen: list[dict[str, float]] = []
    probe = json.dumps(queries(data, 1, seed=6)[0].tolist())
    # The first reopen finds no sidecar and rebuilds from SQLite (leaving one); the
    # next ones map it.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path + sidecar.SUFFIX)
    for _ in range(4):
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, path, str(DIM), probe],
            check=True,
            capture_output=True,
            text=True,
        )
        reopen.append(json.loads(done.stdout))
    return {
        "write_chunks_per_s": n / write_s,
        "close_s": close_s,
        "serve": serve,
        "search_p50_ms": {m: statistics.median(ts) * 1e3 for m, ts in times.items()},
        "reopen": reopen,
        "reopen_rebuild_s": reopen[0]["open_to_first_search_s"],
        "reopen_sidecar_s_median": statistics.median(
            r["open_to_first_search_s"] for r in reopen[1:]
        ),
    }


_MAPPED = """
import json, statistics, sys, time
import numpy as np
from ratatoskr.memory import sidecar
from ratatoskr.memory.index import VectorIndex

def memory():
    out = {}
    for line in open("/proc/self/status"):
        key = line.split(":")[0]
        if key in ("VmHWM", "RssAnon", "RssFile"):
            out[key + "_mb"] = round(int(line.split()[1]) / 1024, 1)
    return out

path, work, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
cases = json.load(open(work + "/mapped_cases.json"))
image = sidecar.read(path, len(cases[0]["q32"]), lineage="index_bench")
index = VectorIndex(image.dim)
index.map_budget = budget
index.adopt(image)
del image
out = {"open": memory()}
for mode in ("user", "tenant", "unfiltered"):
    cpu = []
    for case in cases:
        q = np.asarray(case["q32"], dtype=np.float32)
        start = time.thread_time()
        index.search(q, 10, case["scopes"][mode], [])
        cpu.append(time.thread_time() - start)
    out[mode] = {"cpu_p50_ms": statistics.median(cpu) * 1e3, **memory()}
print(json.dumps(out))
"""


def mapped_section(data: Data, nq: int, workdir: Path) -> dict[str, Any]:
    """The index alone, mapped from a sidecar in fresh processes: pages given back after
    reads (the default budget) against kept (the old behaviour), alternated twice."""
    index = VectorIndex(DIM)
    index.load_units(data.ids, data.unit32, [scope_items(s) for s in data.scopes])
    index.seq = 1
    path = str(workdir / "mapped-index")
    sidecar.write(path, index.image(), lineage="index_bench")
    del index
    rng = np.random.default_rng(9)
    cases = []
    for q in queries(data, nq, seed=10):
        t, u = int(rng.integers(0, TENANTS)), int(rng.integers(0, USERS))
        cases.append(
            {
                "q32": unit_float64(q).astype(np.float32).tolist(),
                "scopes": {m: data.scope(m, t, u) for m in MODES},
            }
        )
    (workdir / "mapped_cases.json").write_text(json.dumps(cases))
    runs: dict[str, list[dict[str, Any]]] = {"released": [], "kept": []}
    for _ in range(2):
        for name, budget in (("released", BUDGET), ("kept", 1 << 50)):
            argv = [sys.executable, "-c", _MAPPED, path, str(workdir), str(budget)]
            done = subprocess.run(argv, check=True, capture_output=True, text=True)
            runs[name].append(json.loads(done.stdout))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 10k instead of 100k")
    parser.add_argument("--n", type=int, default=None, help="chunks (overrides --quick)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--no-store", action="store_true", help="skip the file store part")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument("--mapped", action="store_true", help="the mapped index's RSS")
    parser.add_argument("--only-mapped", action="store_true", help="--mapped alone")
    args = parser.parse_args()
    n = args.n or (10_000 if args.quick else 100_000)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    data = Data(n)
    result: dict[str, Any] = {}
    if not args.only_mapped:
        result["index"] = index_section(data, args.queries)
    if args.mapped or args.only_mapped:
        with tempfile.TemporaryDirectory() as tmp:
            result["mapped"] = mapped_section(data, max(20, args.queries // 4), Path(tmp))
    if not args.no_store and not args.only_mapped:
        with tempfile.TemporaryDirectory() as tmp:
            result["store"] = store_section(data, max(20, args.queries // 4), Path(tmp))
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
