"""Memory plane benchmark: the SQLite + sqlite-vec store against numpy and the reference.

Everything is measured side by side in one run, in one process (plus one fresh
child process for the memory and reopen figures), over 384-dim vectors, top_k = 10:

- ``upsert_many`` in batches of 100 through the store API into a file-backed
  store with the real durability settings (WAL, synchronous=FULL); this also
  builds the N-chunk store every later section reuses;
- search latency (p50/p95) of the store unfiltered, with a 1%-selective scope
  (one tenant of 100), a 0.1% scope (tenant + end user) and ``scope_any``
  unions of 1 and 3 tenants, next to numpy exact brute force (float32 matmul +
  argpartition) over the same unit vectors;
- exactness: recall@10 and the score error of every store result against a
  float64 brute force over the in-scope set, including ties on a near-duplicate
  cluster, and parity with the reference ``InMemoryMemoryStore``;
- at 10k chunks: the store against the reference ``InMemoryMemoryStore``;
- a fresh process that reopens the N-chunk file and serves searches: time to
  open and peak RSS (``ru_maxrss``).

Data: 100 tenants × 10 end users; clustered vectors (float32 values, sent as
JSON floats); queries are a stored vector plus small noise (80%) or random (20%).

    .venv/bin/python benchmarks/memory_bench.py            # full: N = 100k, dim 384
    .venv/bin/python benchmarks/memory_bench.py --quick    # small profile, ~1 minute
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bifrost.consumer.testing import InMemoryMemoryStore
from bifrost.context import DispatchContext
from ratatoskr.memory import RatatoskrMemoryStore, open_memory_store
from ratatoskr.sqlite import driver_versions, sqlite_vec_version

TOP_K = 10
BATCH = 100
ROUNDS = 4
CTX = DispatchContext(actor="bench", plane="memory", verb="upsert_many")
F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Profile:
    name: str
    n: int
    dim: int
    tenants: int
    users: int
    queries: int  # per search mode
    ref_n: int
    ref_queries: int
    dup_n: int  # near-duplicate chunks added to the reference-sized stores
    rss_searches: int


FULL = Profile("full", 100_000, 384, 100, 10, 200, 10_000, 12, 1000, 300)
QUICK = Profile("quick", 10_000, 384, 100, 10, 60, 2_000, 6, 300, 100)


# -- data ------------------------------------------------------------------------------


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
        # The values as a client sends them: float32 numbers written as JSON floats.
        self.raw = raw
        self.unit64 = unit_rows(raw)
        self.unit32 = self.unit64.astype(np.float32)
        self.tenant_of = np.arange(n) % tenants
        self.user_of = (np.arange(n) // tenants) % users
        self.ids = [chunk_id(i) for i in range(n)]

    def tenant(self, t: int) -> str:
        return f"tenant-{t:03d}"

    def user(self, t: int, u: int) -> str:
        return f"user-{t:03d}-{u}"

    def record(self, i: int) -> dict[str, Any]:
        t, u = int(self.tenant_of[i]), int(self.user_of[i])
        return make_record(
            self.ids[i],
            self.raw[i].tolist(),
            {"tenant": self.tenant(t), "end_user": self.user(t, u)},
            i,
        )

    def rows(self, tenant: int | None = None, user: int | None = None) -> npt.NDArray[np.int64]:
        mask = np.ones(self.n, dtype=bool)
        if tenant is not None:
            mask &= self.tenant_of == tenant
        if user is not None:
            mask &= self.user_of == user
        return np.nonzero(mask)[0]


def chunk_id(i: int) -> str:
    return f"chunk-{i:07d}"


def make_record(cid: str, embedding: list[float], scope: dict[str, str], i: int) -> dict[str, Any]:
    return {
        "id": cid,
        "embedding": embedding,
        "scope": scope,
        "content": f"Turn {i}: the user asked about the schedule and the agent answered. " * 3,
        "distillate": f"note {i}: prefers morning meetings",
        "origin": "conversation",
        "trust_tier": "observed",
        "provenance": {"session": f"s-{i // 37}", "turn": i % 37},
    }


def unit_rows(m: npt.NDArray[np.floating]) -> F64:
    m64 = np.asarray(m, dtype=np.float64)
    out: F64 = m64 / np.linalg.norm(m64, axis=1, keepdims=True)
    return out


def batches(items: list[int], size: int = BATCH) -> Iterator[list[int]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def make_queries(
    data: Dataset, rng: np.random.Generator, pool: npt.NDArray[np.int64], count: int
) -> list[list[float]]:
    """80% a stored vector of ``pool`` plus small noise, 20% random directions."""
    out: list[list[float]] = []
    for j in range(count):
        if j % 5 == 4:
            v = rng.standard_normal(data.dim)
        else:
            base = data.raw[int(rng.choice(pool))].astype(np.float64)
            noise = rng.standard_normal(data.dim) * (np.linalg.norm(base) / np.sqrt(data.dim))
            v = base + 0.1 * noise
        out.append(v.tolist())
    return out


# -- measurement -----------------------------------------------------------------------


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def p50(xs: list[float]) -> float:
    return statistics.median(xs)


def p95(xs: list[float]) -> float:
    return float(np.percentile(xs, 95))


@dataclass
class Exactness:
    """Store results against float64 brute force over the in-scope rows."""

    queries: int = 0
    recall_sum: float = 0.0
    max_score_err: float = 0.0
    order_mismatches: int = 0
    short_results: int = 0

    def check(self, data: Dataset, result: list[dict[str, Any]], q: list[float], rows: Any) -> None:
        qu = np.asarray(q, dtype=np.float64)
        qu = qu / np.linalg.norm(qu)
        idx = np.arange(data.n) if rows is None else np.asarray(rows)
        scores = data.unit64[idx] @ qu
        near = np.arange(len(idx))
        if len(idx) > TOP_K:
            kth = np.partition(-scores, TOP_K - 1)[TOP_K - 1]
            near = np.nonzero(-scores <= kth + 1e-12)[0]
        order = sorted(near.tolist(), key=lambda j: (-scores[j], data.ids[idx[j]]))[:TOP_K]
        truth = [data.ids[idx[j]] for j in order]
        truth_score = {data.ids[idx[j]]: float(scores[j]) for j in order}
        got = [r["chunk_id"] for r in result]
        self.queries += 1
        self.recall_sum += len(set(got) & set(truth)) / max(1, min(TOP_K, len(idx)))
        if got != truth:
            self.order_mismatches += 1
        if len(got) < min(TOP_K, len(idx)):
            self.short_results += 1
        for r in result:
            if r["chunk_id"] in truth_score:
                err = abs(r["score"] - truth_score[r["chunk_id"]])
                self.max_score_err = max(self.max_score_err, err)

    @property
    def recall(self) -> float:
        return self.recall_sum / max(1, self.queries)


@dataclass
class Report:
    profile: Profile
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def add(self, metric: str, value: str, target: str = "", ok: bool | None = None) -> None:
        verdict = "" if ok is None else ("PASS" if ok else "FAIL")
        if ok is False:
            self.failures.append(metric)
        self.rows.append((metric, value, target, verdict))
        print(f"  {metric}: {value}  {target}  {verdict}", flush=True)

    def markdown(self, header: list[str]) -> str:
        lines = [
            *header,
            "",
            "| metric | measured | target | verdict |",
            "| --- | --- | --- | --- |",
        ]
        lines += [f"| {m} | {v} | {t} | {o} |" for m, v, t, o in self.rows]
        if self.notes:
            lines += ["", *[f"- {n}" for n in self.notes]]
        return "\n".join(lines) + "\n"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


# -- sections --------------------------------------------------------------------------


def build_store(
    path: str, data: Dataset, ids: list[int], report: Report | None
) -> RatatoskrMemoryStore:
    """Open a fresh file store and upsert ``ids`` in batches of 100, timing only the calls."""
    store = open_memory_store(path, embedding_dim=data.dim)
    spent: list[float] = []
    for b, part in enumerate(batches(ids)):
        records = [data.record(i) for i in part]
        key = f"build-{b}"
        seconds, _ = timed(partial(store.upsert_many, records, idempotency_key=key, ctx=CTX))
        spent.append(seconds)
    if report is not None:
        total = sum(spent)
        rate = len(ids) / total
        report.add(
            f"upsert_many, batches of {BATCH}, file store (WAL, synchronous=FULL)",
            f"{rate:,.0f} chunks/s (p50 batch {ms(p50(spent))}, {len(ids):,} chunks)",
            "≥ 10,000 chunks/s",
            rate >= 10_000,
        )
    return store


def search_section(
    report: Report, store: RatatoskrMemoryStore, data: Dataset, rng: np.random.Generator
) -> None:
    prof = report.profile
    nq = prof.queries
    tenants = rng.integers(0, data.tenants, nq)
    others = [rng.choice(np.delete(np.arange(data.tenants), t), 2, replace=False) for t in tenants]
    users = rng.integers(0, data.users, nq)
    q_all = make_queries(data, rng, np.arange(data.n), nq)
    q_scoped = [make_queries(data, rng, data.rows(int(t)), 1)[0] for t in tenants]
    modes: dict[str, list[float]] = {
        k: []
        for k in (
            "numpy",
            "numpy_scope",
            "unfiltered",
            "tenant",
            "tenant_user",
            "any1",
            "any3",
        )
    }
    exact = {k: Exactness() for k in ("unfiltered", "tenant", "tenant_user", "any1", "any3")}
    matrix = data.unit32
    tenant_rows = {t: data.rows(t) for t in range(data.tenants)}

    def brute(q32: F32, rows: Any) -> Any:
        scores = matrix @ q32 if rows is None else matrix[rows] @ q32
        top = np.argpartition(-scores, TOP_K - 1)[:TOP_K]
        return top[np.argsort(-scores[top])]

    calls: list[list[tuple[str, Callable[[], Any], Any, list[float] | None]]] = []
    for j in range(nq):
        t = int(tenants[j])
        a, b = (int(x) for x in others[j])
        q, qs = q_all[j], q_scoped[j]
        q64 = np.asarray(q, dtype=np.float64)
        q32 = (q64 / np.linalg.norm(q64)).astype(np.float32)
        qs64 = np.asarray(qs, dtype=np.float64)
        qs32 = (qs64 / np.linalg.norm(qs64)).astype(np.float32)
        any3 = [{"tenant": data.tenant(x)} for x in (t, a, b)]
        user_scope = {"tenant": data.tenant(t), "end_user": data.user(t, int(users[j]))}
        calls.append(
            [
                ("numpy", partial(brute, q32, None), None, None),
                ("numpy_scope", partial(brute, qs32, tenant_rows[t]), None, None),
                ("unfiltered", partial(store.search, q, top_k=TOP_K), None, q),
                (
                    "tenant",
                    partial(store.search, qs, top_k=TOP_K, scope_all={"tenant": data.tenant(t)}),
                    tenant_rows[t],
                    qs,
                ),
                (
                    "tenant_user",
                    partial(store.search, qs, top_k=TOP_K, scope_all=user_scope),
                    data.rows(t, int(users[j])),
                    qs,
                ),
                (
                    "any1",
                    partial(store.search, qs, top_k=TOP_K, scope_any=any3[:1]),
                    tenant_rows[t],
                    qs,
                ),
                (
                    "any3",
                    partial(store.search, qs, top_k=TOP_K, scope_any=any3),
                    np.sort(np.concatenate([tenant_rows[x] for x in (t, a, b)])),
                    qs,
                ),
            ]
        )
    # Each mode runs in blocks of consecutive queries (as a service sees a stream),
    # in ROUNDS rounds with the order of modes rotated, so drift in the machine's
    # load falls on every mode alike. Each block starts with 3 untimed calls.
    names = [name for name, _, _, _ in calls[0]]
    results: dict[tuple[str, int], Any] = {}
    gc.collect()
    gc.freeze()  # this script's own heap (queries, data) stays out of the collections
    per_round = -(-nq // ROUNDS)
    for rnd in range(ROUNDS):
        block = range(rnd * per_round, min(nq, (rnd + 1) * per_round))
        for m in range(len(names)):
            idx = (m + rnd) % len(names)
            for j in list(block)[:3]:
                calls[j][idx][1]()
            for j in block:
                seconds, results[(names[idx], j)] = timed(calls[j][idx][1])
                modes[names[idx]].append(seconds)
    gc.unfreeze()
    for j in range(nq):
        for name, _, rows, query in calls[j]:
            if query is not None:
                exact[name].check(data, results[(name, j)], query, rows)
    tenant_calls = [c[3] for c in calls]

    n = data.n
    base = p50(modes["numpy"])
    unf = p50(modes["unfiltered"])
    ten = p50(modes["tenant"])
    one = p50(modes["any1"])
    three = p50(modes["any3"])
    report.add(
        f"numpy brute force, {n:,} × {data.dim}", f"p50 {ms(base)}, p95 {ms(p95(modes['numpy']))}"
    )
    report.add(
        f"store search, unfiltered, {n:,} chunks",
        f"p50 {ms(unf)}, p95 {ms(p95(modes['unfiltered']))} — {unf / base:.2f}× numpy",
        "≤ 2× numpy",
        unf <= 2 * base,
    )
    report.add(
        "numpy brute force over one tenant's rows (1%)",
        f"p50 {ms(p50(modes['numpy_scope']))}",
    )
    report.add(
        "store search, scope_all one tenant (1%)",
        f"p50 {ms(ten)}, p95 {ms(p95(modes['tenant']))} — {ten / unf:.3f}× unfiltered",
        "≤ 2 ms and ≤ 0.1× unfiltered",
        ten <= 2e-3 and ten <= 0.1 * unf,
    )
    report.add(
        "store search, scope_all tenant + end user (0.1%)",
        f"p50 {ms(p50(modes['tenant_user']))}, p95 {ms(p95(modes['tenant_user']))}",
    )
    report.add("store search, scope_any of 1 tenant", f"p50 {ms(one)}")
    report.add(
        "store search, scope_any union of 3 tenants (3%)",
        f"p50 {ms(three)}, p95 {ms(p95(modes['any3']))} — {three / one:.2f}× one member",
        "≤ 3× one member",
        three <= 3 * one,
    )
    for name, ex in exact.items():
        ok = ex.recall == 1.0 and ex.order_mismatches == 0 and ex.short_results == 0
        report.add(
            f"exactness vs float64 brute force, {name}",
            f"recall@10 {ex.recall:.4f}, order mismatches {ex.order_mismatches}/{ex.queries},"
            f" max score error {ex.max_score_err:.1e}",
            "recall 1.0, same order, error ≤ 1e-5",
            ok and ex.max_score_err <= 1e-5,
        )
    threaded_section(report, store, tenant_calls)


def threaded_section(
    report: Report,
    store: RatatoskrMemoryStore,
    calls: list[tuple[str, Callable[[], Any], Any, Any]],
) -> None:
    """Throughput of the same scoped searches from 1 and from 2 threads."""
    fns = [fn for _, fn, _, _ in calls]
    rates = {}
    for workers in (1, 2):
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda f: f(), fns[:4]))
            start = time.perf_counter()
            list(pool.map(lambda f: f(), fns + fns))
            rates[workers] = 2 * len(fns) / (time.perf_counter() - start)
    report.add(
        "throughput, tenant-scoped searches, 1 → 2 threads",
        f"{rates[1]:,.0f} → {rates[2]:,.0f} searches/s",
    )


def dup_records(data: Dataset, rng: np.random.Generator, count: int) -> list[dict[str, Any]]:
    """A cluster of near-duplicates (and exact duplicates) in a tenant of its own."""
    base = data.raw[0].astype(np.float64)
    out = []
    for k in range(count):
        if k % 10 == 0:
            v = base  # exact duplicates: equal scores, ordered by chunk_id
        else:
            v = base + 1e-6 * np.abs(base).mean() * rng.standard_normal(data.dim)
        out.append(
            make_record(
                f"dup-{(k * 7919) % count:05d}",
                v.astype(np.float32).tolist(),
                {"tenant": "tenant-dup", "end_user": "user-dup"},
                k,
            )
        )
    return out


def reference_section(
    report: Report, workdir: str, data: Dataset, rng: np.random.Generator
) -> None:
    prof = report.profile
    ids = list(range(prof.ref_n))
    ref = InMemoryMemoryStore(data.dim)
    for b, part in enumerate(batches(ids)):
        ref.upsert_many([data.record(i) for i in part], idempotency_key=f"r{b}", ctx=CTX)
    store = build_store(os.path.join(workdir, "ref-size.db"), data, ids, None)
    dups = dup_records(data, rng, prof.dup_n)
    for b, part in enumerate(batches(list(range(len(dups))))):
        recs = [dups[i] for i in part]
        ref.upsert_many(recs, idempotency_key=f"d{b}", ctx=CTX)
        store.upsert_many(recs, idempotency_key=f"d{b}", ctx=CTX)
    pool = np.arange(prof.ref_n)
    queries = make_queries(data, rng, pool, prof.ref_queries)
    dup_q = (data.raw[0].astype(np.float64) + 1e-3 * rng.standard_normal(data.dim)).tolist()
    for q in queries[:2]:
        store.search(q, top_k=TOP_K)
    times: dict[str, list[float]] = {"ref": [], "store": [], "ref_t": [], "store_t": []}
    mismatches = 0
    max_err = 0.0

    def compare(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
        nonlocal mismatches, max_err
        if [r["chunk_id"] for r in a] != [r["chunk_id"] for r in b] or [
            (r["chunk"], r["revision"]) for r in a
        ] != [(r["chunk"], r["revision"]) for r in b]:
            mismatches += 1
        for x, y in zip(a, b, strict=False):
            max_err = max(max_err, abs(x["score"] - y["score"]))

    # One block per store and kind (not interleaved: the reference's pure-Python scans
    # would leave cold caches behind for the next call); the store, being cheap, runs
    # every query 5 times. gc.freeze keeps each heap out of the other's collections.
    gc.collect()
    gc.freeze()
    scoped = [(q, {"tenant": data.tenant(j % data.tenants)}) for j, q in enumerate(queries)]
    ref_unf = [timed(partial(ref.search, q, top_k=TOP_K)) for q in queries]
    ref_ten = [timed(partial(ref.search, q, top_k=TOP_K, scope_all=s)) for q, s in scoped]
    sto_unf = [timed(partial(store.search, q, top_k=TOP_K)) for q in queries * 5]
    sto_ten = [timed(partial(store.search, q, top_k=TOP_K, scope_all=s)) for q, s in scoped * 5]
    for (_, a), (_, b) in zip(ref_unf + ref_ten, sto_unf[: len(queries)] + sto_ten, strict=False):
        compare(a, b)
    times["ref"] = [t for t, _ in ref_unf]
    times["ref_t"] = [t for t, _ in ref_ten]
    times["store"] = [t for t, _ in sto_unf]
    times["store_t"] = [t for t, _ in sto_ten]
    dup_times: list[float] = []
    for _ in range(max(5, prof.ref_queries)):
        t_sto, r_sto = timed(
            lambda: store.search(dup_q, top_k=TOP_K, scope_all={"tenant": "tenant-dup"})
        )
        dup_times.append(t_sto)
    compare(ref.search(dup_q, top_k=TOP_K, scope_all={"tenant": "tenant-dup"}), r_sto)
    compare(ref.search(dup_q, top_k=TOP_K), store.search(dup_q, top_k=TOP_K))
    big_k = min(100, prof.dup_n)
    t_big, r_big = timed(
        lambda: store.search(dup_q, top_k=big_k, scope_all={"tenant": "tenant-dup"})
    )
    compare(ref.search(dup_q, top_k=big_k, scope_all={"tenant": "tenant-dup"}), r_big)
    store.close()
    gc.unfreeze()
    n_total = prof.ref_n + prof.dup_n
    r_u, s_u = p50(times["ref"]), p50(times["store"])
    r_t, s_t = p50(times["ref_t"]), p50(times["store_t"])
    report.add(
        f"vs InMemoryMemoryStore at {n_total:,} chunks, unfiltered",
        f"reference p50 {ms(r_u)}, store p50 {ms(s_u)} — {r_u / s_u:,.0f}× faster",
        "≥ 50×",
        r_u >= 50 * s_u,
    )
    report.add(
        f"vs InMemoryMemoryStore at {n_total:,} chunks, one tenant",
        f"reference p50 {ms(r_t)}, store p50 {ms(s_t)} — {r_t / s_t:,.0f}× faster",
        "≥ 50×",
        r_t >= 50 * s_t,
    )
    report.add(
        f"near-duplicate cluster ({prof.dup_n} chunks within ~1e-6), scoped",
        f"p50 {ms(p50(dup_times))} at top_k=10, {ms(t_big)} at top_k={big_k}",
    )
    report.add(
        "parity with InMemoryMemoryStore (ids, order, chunks, revisions, scores)",
        f"{mismatches} mismatching results, max score difference {max_err:.1e}",
        "0 mismatches, ≤ 1e-5",
        mismatches == 0 and max_err <= 1e-5,
    )


# ru_maxrss survives fork and exec: a child forked from this (large) process would
# report this process's peak. So the child is started by a launcher forked at the
# start of the run, while this process was small.
_LAUNCHER = (
    "import json, subprocess, sys\n"
    "cmd = json.loads(sys.stdin.readline())\n"
    "r = subprocess.run(cmd, capture_output=True, text=True)\n"
    "sys.stdout.write(r.stdout); sys.stderr.write(r.stderr); sys.exit(r.returncode)\n"
)


def start_launcher() -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _LAUNCHER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def rss_section(
    report: Report, path: str, data: Dataset, launcher: subprocess.Popen[str], floor_mb: float
) -> None:
    prof = report.profile
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child-rss",
        path,
        "--dim",
        str(data.dim),
        "--searches",
        str(prof.rss_searches),
        "--tenants",
        str(data.tenants),
    ]
    out, err = launcher.communicate(json.dumps(cmd) + "\n")
    if launcher.returncode != 0:
        raise RuntimeError(f"RSS child failed: {err}")
    facts = json.loads(out.strip().splitlines()[-1])
    size = sum(
        os.path.getsize(p) for p in (path, path + "-wal", path + "-shm") if os.path.exists(p)
    )
    report.add(
        f"reopen the {data.n:,}-chunk store (fresh process)",
        f"{facts['open_s']:.2f} s (file {size / 2**20:,.0f} MiB)",
    )
    report.add(
        f"peak RSS, fresh process: open + {prof.rss_searches} searches",
        f"{facts['rss_searches_mb']:.0f} MB (after imports {facts['rss_imports_mb']:.0f} MB,"
        f" after open {facts['rss_open_mb']:.0f} MB; VmHWM {facts['vmhwm_mb']:.0f} MB;"
        f" inherited floor {floor_mb:.0f} MB)",
        "≤ 400 MB",
        facts["rss_searches_mb"] <= 400,
    )
    report.add(
        "peak RSS after also reading every record once (get_many)",
        f"{facts['rss_sweep_mb']:.0f} MB",
    )


def child_rss(args: argparse.Namespace) -> None:
    """In a fresh process: open the existing store, search, report times and ru_maxrss."""

    def rss_mb() -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    facts: dict[str, float] = {"rss_imports_mb": rss_mb()}
    open_s, store = timed(lambda: open_memory_store(args.child_rss, embedding_dim=args.dim))
    facts["open_s"] = open_s
    facts["rss_open_mb"] = rss_mb()
    rng = np.random.default_rng(7)
    for j in range(args.searches):
        hit = store.get(chunk_id(int(rng.integers(0, 1000))))
        base = np.asarray(hit["embedding"] if hit else rng.standard_normal(args.dim))
        q = (base + 0.01 * rng.standard_normal(args.dim)).tolist()
        if j % 2:
            store.search(q, top_k=TOP_K)
        else:
            store.search(q, top_k=TOP_K, scope_all={"tenant": f"tenant-{j % args.tenants:03d}"})
    facts["rss_searches_mb"] = rss_mb()
    with store.database.read() as conn:
        all_ids = [str(r[0]) for r in conn.execute("SELECT chunk_id FROM memory_chunks")]
    for start in range(0, len(all_ids), 1000):
        store.get_many(all_ids[start : start + 1000])
    facts["rss_sweep_mb"] = rss_mb()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            facts["vmhwm_mb"] = int(line.split()[1]) / 1024
    store.close()
    print(json.dumps(facts))


# -- main ------------------------------------------------------------------------------


def _loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def machine_header(prof: Profile, seconds: float, *load: str) -> list[str]:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = driver_versions()
    return [
        f"# Memory plane benchmark — {dt.date.today().isoformat()} ({prof.name} profile)",
        "",
        f"N = {prof.n:,} chunks, dim {prof.dim}, top_k {TOP_K}, {prof.tenants} tenants ×"
        f" {prof.users} end users, {prof.queries} queries per search mode (p50 over them).",
        f"Machine: {cpu}, {os.cpu_count()} CPUs; Python {platform.python_version()},"
        f" numpy {np.__version__}, apsw {versions['apsw']}, SQLite {versions['sqlite']},"
        f" sqlite-vec {sqlite_vec_version()}. Run took {seconds:.0f} s; load average"
        f" {load[0]} at the start, {_loadavg()} at the end (other work shared the machine).",
        "Reproduce: `.venv/bin/python benchmarks/memory_bench.py"
        + (" --quick`" if prof.name == "quick" else "`"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small profile (N=10k)")
    parser.add_argument("--n", type=int, help="override the number of chunks")
    parser.add_argument("--queries", type=int, help="override queries per search mode")
    parser.add_argument("--seed", type=int, default=20240611)
    parser.add_argument("--out", help="markdown output path (default benchmarks/results/…)")
    parser.add_argument("--workdir", help="where to build the stores (default: a temp dir)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target fails")
    parser.add_argument("--child-rss", help=argparse.SUPPRESS)
    parser.add_argument("--dim", type=int, default=384, help=argparse.SUPPRESS)
    parser.add_argument("--searches", type=int, default=300, help=argparse.SUPPRESS)
    parser.add_argument("--tenants", type=int, default=100, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_rss:
        child_rss(args)
        return 0
    prof = QUICK if args.quick else FULL
    if args.n or args.queries:
        prof = Profile(
            prof.name if not args.n else f"{prof.name}, n={args.n}",
            args.n or prof.n,
            prof.dim,
            prof.tenants,
            prof.users,
            args.queries or prof.queries,
            min(prof.ref_n, args.n or prof.n),
            prof.ref_queries,
            prof.dup_n,
            prof.rss_searches,
        )
    started = time.perf_counter()
    load_start = _loadavg()
    notes = []
    if prof.n < FULL.n:
        notes.append(
            "Targets are set for N = 100k and the reference at 10k; at this size the"
            " verdicts are only indicative (fixed per-call costs dominate)."
        )
    floor_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    launcher = start_launcher()
    report = Report(prof, notes=notes)
    workdir = args.workdir or tempfile.mkdtemp(prefix="memory-bench-")
    os.makedirs(workdir, exist_ok=True)
    try:
        print(f"[{prof.name}] generating {prof.n:,} × {prof.dim} vectors", flush=True)
        data = Dataset(prof.n, prof.dim, prof.tenants, prof.users, args.seed)
        rng = np.random.default_rng(args.seed + 1)
        path = os.path.join(workdir, f"memory-{prof.n}x{prof.dim}.db")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)
        print("upserting (builds the store)", flush=True)
        store = build_store(path, data, list(range(prof.n)), report)
        print("searching", flush=True)
        search_section(report, store, data, rng)
        store.close()
        print("reference store", flush=True)
        reference_section(report, workdir, data, rng)
        print("fresh process: reopen + RSS", flush=True)
        rss_section(report, path, data, launcher, floor_mb)
    finally:
        if launcher.poll() is None:
            launcher.kill()
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    header = machine_header(prof, time.perf_counter() - started, load_start)
    text = report.markdown(header)
    print()
    print(text)
    out = args.out or os.path.join(
        os.path.dirname(os.path.abspath(__file__)),
        "results",
        f"memory-{dt.date.today().isoformat()}{'-quick' if prof.name == 'quick' else ''}.md",
    )
    os.makedirs(os.path.dirname(out), exist_ok=True)
    Path(out).write_text(text)
    print(f"written to {out}")
    if report.failures:
        print("targets failed: " + "; ".join(report.failures))
    return 1 if (args.strict and report.failures) else 0


if __name__ == "__main__":
    sys.exit(main())
