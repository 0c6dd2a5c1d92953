"""Ratatoskr side by side with the stores users would pick instead (`make bench`).

One run, every contender on the same data, each in processes of its own:

- numpy exact brute force over the in-scope vectors (float32 matmul + argpartition);
- ratatoskr's memory store called directly (``open_memory_store``);
- ratatoskr through the provider over HTTP (``ratatoskr serve --plane memory`` on
  127.0.0.1, ``bifrost.client.BifrostClient`` with a real per-call token whose
  grant is the searched scope);
- the reference ``bifrost.consumer.testing.InMemoryMemoryStore`` (10k only);
- LangGraph's ``SqliteStore`` with its sqlite-vec index, a namespace per scope
  (under Debian's python3 from ``benchmarks/.venv-peers``);
- Chroma ``PersistentClient`` (HNSW, cosine) with a ``where`` filter on the scope;
- LanceDB embedded (IVF_PQ index, cosine, BITMAP scalar indexes) with pre-filter;
- and the VMP plane against valoricore (``vmp_bench.py``).

Data: 384-dim unit vectors (clustered, as embeddings are), 100 tenants × 10 end
users, tenants in 10 groups; every chunk carries ``{group, tenant, end_user}``.
Searches (top 10): unfiltered, one tenant (1% of the chunks), one group (10%);
queries are 80% a stored in-scope vector plus noise, 20% random directions.
Recall@10 is against a float64 brute force over the in-scope set.

    .venv/bin/python benchmarks/compare.py --profile quick   # N = 10k, 100k; < 10 min
    .venv/bin/python benchmarks/compare.py --profile full    # N = 100k, 1M; ~40 min

The full profile bounds its time (see ``FULL``): ratatoskr and numpy load all 1M
chunks; a peer's loading stops at its budget and its row says how many it holds (its
searches and recall are then over those, against a float64 brute force of the same
prefix); every search mode stops at 100 queries or 10 s, whichever first (at least 3),
and a cell says how many ran. ``--profile full --sizes 40000 --budget-scale 0.03``
rehearses those time boxes in a few minutes.

Writes ``benchmarks/results/<date>.md`` and ``<date>-*.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil  # type: ignore[import-untyped]  # no stubs in the dev group

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import HERE, fmt_ms, machine_line, p50, p99, progress, ratatoskr_server, version_of
from contenders import MODES, TOP_K, Data, scope_filter, timed_queries
from vmp_bench import DimResult

# -- profiles ------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    """What one size N of a profile runs: every bound on its time is here."""

    n: int
    queries: int  # per search mode (the most that run: see mode_budget_s)
    http_upsert_cap: int  # chunks upserted over HTTP (the rest of a bigger store directly)
    load_seconds: float
    load_max_requests: int
    timed_upserts: int  # the last K chunks of a store are upserted (and timed) in 100s
    mode_budget_s: float  # seconds of searching per mode before a contender stops early
    min_queries: int  # queries per mode that run whatever the budget
    worker_timeout_s: float  # a contender's process is killed past this (a safety net)
    # Seconds of loading per contender; past it the peer holds a prefix of the N chunks
    # and its row says so. Not given: loaded in full (ratatoskr, numpy: always).
    build_budget_s: tuple[tuple[str, float], ...] = ()

    def budget_of(self, contender: str) -> float:
        return dict(self.build_budget_s).get(contender, 0.0)


@dataclass(frozen=True)
class Profile:
    name: str
    stages: tuple[Stage, ...]
    vmp_n: int
    vmp_m: int
    vmp_q: int
    reference_max_n: int = 10_000

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(s.n for s in self.stages)

    @property
    def queries(self) -> int:
        return max(s.queries for s in self.stages)


def quick_stage(n: int) -> Stage:
    return Stage(n, 50, 5_000, 6.0, 20_000, 10_000, 6.0, 10, 600)


QUICK = Profile("quick", (quick_stage(10_000), quick_stage(100_000)), 10_000, 100, 100)
# The full profile: N = 1M, plus 100k at the quick profile's settings (the scaling point
# of the plots; `make bench` publishes 10k). Budgets so that `make bench-full` ends
# within an hour on 2 shared cores (compare.py ~35 min of it, postgres_bench ~13):
# ratatoskr loads all 1M (~9-14 min at 1,200-1,800 chunks/s); a peer's loading stops at
# its budget; each search mode runs at most 100 queries or 10 s (at least 3 queries).
FULL = Profile(
    "full",
    (
        quick_stage(100_000),
        Stage(
            1_000_000,
            100,
            5_000,
            15.0,
            50_000,
            20_000,
            10.0,
            3,
            1500,
            (("langgraph", 240.0), ("chroma", 180.0), ("lancedb", 180.0)),
        ),
    ),
    10_000,
    100,
    100,
)
DIM = 384
CLIENTS = 8
LABELS = {
    "ratatoskr": "ratatoskr (store API)",
    "ratatoskr-http": "ratatoskr over HTTP",
    "numpy": "numpy brute force",
    "reference": "InMemoryMemoryStore",
    "langgraph": "LangGraph SqliteStore",
    "chroma": "Chroma",
    "lancedb": "LanceDB",
}
ORDER = ["ratatoskr", "ratatoskr-http", "numpy", "reference", "langgraph", "chroma", "lancedb"]
COLORS = {c: f"C{i}" for i, c in enumerate(ORDER)}  # one colour per contender in every plot


# -- data ------------------------------------------------------------------------------


def make_data(root: Path, prof: Profile, seed: int) -> None:
    """Vectors for the largest N (smaller N use a prefix) and per-N queries + truth.

    The vectors are written once per (size, seed) and kept; queries and truth are made
    again by every run (vectorised: ~1 min at 1M, most of it the 1M vectors)."""
    root.mkdir(parents=True, exist_ok=True)
    n_max = max(prof.sizes)
    rng = np.random.default_rng(seed)
    path = root / "vectors.npy"
    stamp = root / "complete"
    if not stamp.exists():
        centres = rng.standard_normal((max(n_max // 100, 10), DIM)).astype(np.float32)
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n_max, DIM))
        for start in range(0, n_max, 65536):
            stop = min(n_max, start + 65536)
            assign = rng.integers(0, centres.shape[0], stop - start)
            block = centres[assign] + 1.2 * rng.standard_normal((stop - start, DIM)).astype(
                np.float32
            )
            out[start:stop] = block / np.linalg.norm(block, axis=1, keepdims=True)
        out.flush()
        del out
        stamp.write_text("ok")
    vectors = np.load(path, mmap_mode="r")
    for stage in prof.stages:
        n, queries = stage.n, stage.queries
        data = Data(str(root), n)
        qrng = np.random.default_rng(seed + n)
        for mode in MODES:
            # The in-scope row each query starts from: tenant t owns rows t, t+100, …;
            # a group's ten tenants own equal shares of its rows.
            if mode == "unfiltered":
                sels = np.full(queries, -1, dtype=np.int64)
                rows = qrng.integers(0, n, queries)
            else:
                span = 100 if mode == "tenant" else 10
                sels = qrng.integers(0, span, queries).astype(np.int64)
                tenant = sels if mode == "tenant" else sels * 10 + qrng.integers(0, 10, queries)
                rows = tenant + 100 * qrng.integers(0, max(1, n // 100), queries)
                rows = np.where(rows < n, rows, tenant)
            near = np.asarray(vectors[np.sort(rows)], dtype=np.float64)[
                np.argsort(np.argsort(rows))
            ]
            noise = 0.1 * qrng.standard_normal((queries, DIM)) / np.sqrt(DIM)
            random_dir = qrng.standard_normal((queries, DIM))
            v = np.where((np.arange(queries) % 5 == 4)[:, None], random_dir, near + noise)
            qs = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
            np.save(root / f"q-{n}-{mode}.npy", qs)
            np.save(root / f"s-{n}-{mode}.npy", sels)
            np.save(root / f"t-{n}-{mode}.npy", truth(vectors, data, mode, qs, sels))


def truth_of(data_root: Path, n: int, mode: str, loaded: int = 0) -> Any:
    """The exact top 10 of the N = n queries of ``mode``; over the first ``loaded``
    chunks when a time-boxed contender holds only those (computed once, kept)."""
    if not loaded or loaded >= n:
        return np.load(data_root / f"t-{n}-{mode}.npy")
    path = data_root / f"t-{n}-{mode}-{loaded}.npy"
    if not path.exists():
        vectors = np.load(data_root / "vectors.npy", mmap_mode="r")
        qs = np.load(data_root / f"q-{n}-{mode}.npy")
        sels = np.load(data_root / f"s-{n}-{mode}.npy")
        np.save(path, truth(vectors, Data(str(data_root), loaded), mode, qs, sels))
    return np.load(path)


def truth(vectors: np.ndarray, data: Data, mode: str, qs: np.ndarray, sels: np.ndarray) -> Any:
    """Exact top 10 rows per query, float64 over the in-scope rows (of the first
    ``data.n``): blocks of rows against every query at once, one pass per scope."""
    n = data.n
    q64 = qs.astype(np.float64)
    q64 /= np.linalg.norm(q64, axis=1, keepdims=True)
    out = np.empty((len(qs), TOP_K), dtype=np.int64)
    if mode == "unfiltered":
        best_s = np.full((len(qs), 0), -np.inf)
        best_i = np.empty((len(qs), 0), dtype=np.int64)
        for start in range(0, n, 131072):
            stop = min(n, start + 131072)
            block = np.asarray(vectors[start:stop], dtype=np.float64)
            block /= np.linalg.norm(block, axis=1, keepdims=True)
            s = q64 @ block.T
            s_all = np.concatenate([best_s, s], axis=1)
            i_all = np.concatenate(
                [best_i, np.broadcast_to(np.arange(start, stop), s.shape)], axis=1
            )
            keep = np.argpartition(-s_all, TOP_K - 1, axis=1)[:, :TOP_K]
            best_s = np.take_along_axis(s_all, keep, axis=1)
            best_i = np.take_along_axis(i_all, keep, axis=1)
        order = np.argsort(-best_s, axis=1)
        return np.take_along_axis(best_i, order, axis=1)
    owner = data.tenant_of if mode == "tenant" else data.group_of
    for sel in np.unique(sels):
        js = np.nonzero(sels == sel)[0]
        rows = np.nonzero(owner == sel)[0]
        block = np.asarray(vectors[rows], dtype=np.float64)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        scores = q64[js] @ block.T
        for k, j in enumerate(js):
            s = scores[k]
            top = np.argpartition(-s, TOP_K - 1)[:TOP_K]
            out[j] = rows[top[np.argsort(-s[top])]]
    return out


# -- results ---------------------------------------------------------------------------


@dataclass
class Row:
    contender: str
    n: int
    upsert_rate: float = float("nan")  # chunks/s in batches of 100
    upsert_batch_p50: float = float("nan")
    upsert_note: str = ""
    write_bytes_per_chunk: float = float("nan")  # storage writes during the timed upserts
    search: dict[str, tuple[float, float]] = field(default_factory=dict)  # mode -> (p50, p99)
    recall: dict[str, float] = field(default_factory=dict)
    reopen_s: float = float("nan")
    rss_mb: float = float("nan")
    extra: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    loaded: int = 0  # chunks a time-boxed contender holds (0: all N)
    queries: dict[str, tuple[int, int]] = field(default_factory=dict)  # mode -> (ran, planned)


def recall_of(rows: list[list[int]], truth_rows: np.ndarray) -> float:
    total = 0.0
    for got, want in zip(rows, truth_rows, strict=True):
        total += len(set(got[:TOP_K]) & set(want.tolist())) / TOP_K
    return total / max(1, len(rows))


def fill_serve(row: Row, serve: dict[str, Any], data_root: Path) -> None:
    row.reopen_s = serve["open_s"] + serve.get("first_search_s", 0.0)
    row.rss_mb = serve.get("vmhwm_mb", float("nan"))
    for mode, res in serve["modes"].items():
        row.search[mode] = (p50(res["times"]), p99(res["times"]))
        row.queries[mode] = (len(res["times"]), res.get("planned", len(res["times"])))
        t = truth_of(data_root, row.n, mode, row.loaded)[: len(res["rows"])]
        row.recall[mode] = recall_of(res["rows"], t)


def fill_build(row: Row, build: dict[str, Any]) -> None:
    if build.get("skip_upsert"):
        row.upsert_note = "—"
        return
    loaded = build.get("loaded", row.n)
    if loaded < row.n:
        row.loaded = loaded
        row.extra["time_boxed"] = {
            "loaded": loaded,
            "load_s": build.get("load_s", build.get("build_wall_s", float("nan"))),
            "budget_s": build.get("build_budget_s"),
        }
    spent = build["batch_s"]
    chunks = loaded - build.get("bulk_rows", 0)
    row.upsert_rate = chunks / sum(spent) if spent else float("nan")
    row.upsert_batch_p50 = p50(spent)
    synced = build.get("fsync_s") or []
    if spent and len(synced) == len(spent):
        # The same adds made durable (each one's new files fsync'd, timed apart).
        row.extra["durable_rate"] = chunks / (sum(spent) + sum(synced))
    if build.get("timed_write_bytes") is not None and spent:
        row.write_bytes_per_chunk = build["timed_write_bytes"] / chunks
    if build.get("bulk_rows"):
        row.upsert_note = f"last {chunks:,}"
        row.extra["bulk_rate"] = build["bulk_rows"] / build["bulk_s"]
        row.extra["bulk_rows"] = build["bulk_rows"]
    for key in ("optimize_s", "vector_index_s", "vector_index_abandoned_s", "scalar_index_s"):
        if key in build:
            row.extra[key] = build[key]


# -- running contenders ------------------------------------------------------------------


def run_worker(
    python: str,
    phase: str,
    contender: str,
    data: Path,
    n: int,
    store: Path,
    stage: Stage,
    loaded: int = 0,
) -> dict[str, Any]:
    out = store / f"{contender}-{phase}.json"
    cmd = [
        python,
        str(HERE / "contenders.py"),
        phase,
        "--contender",
        contender,
        "--data",
        str(data),
        "--n",
        str(n),
        "--store",
        str(store),
        "--out",
        str(out),
        "--queries",
        str(stage.queries),
        "--mode-budget",
        str(stage.mode_budget_s),
        "--min-queries",
        str(stage.min_queries),
        "--timed-upserts",
        str(stage.timed_upserts),
        "--build-budget",
        str(stage.budget_of(contender)),
        "--loaded",
        str(loaded),
    ]
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False", "PYTHONPATH": ""}
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=stage.worker_timeout_s, env=env, check=False
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-6:]
        raise RuntimeError(" / ".join(tail) or f"exit {proc.returncode}")
    built: dict[str, Any] = json.loads(out.read_text())
    return built


def read_vmhwm(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


HEIMDALL_KEY = secrets.token_hex(32)


def server_env(db: Path) -> dict[str, str]:
    return {
        "RATATOSKR_MEMORY_DB": str(db),
        "RATATOSKR_MEMORY_EMBEDDING_DIM": str(DIM),
        "RATATOSKR_HEIMDALL_KEY": HEIMDALL_KEY,
        "RATATOSKR_LOG_LEVEL": "warning",
    }


def http_client(url: str) -> Any:
    from bifrost.client import BifrostClient  # noqa: PLC0415 - keeps --help light

    return BifrostClient(url, HEIMDALL_KEY.encode(), actor="bench", plane="memory")


def http_build(row: Row, data_root: Path, work: Path, cap: int) -> None:
    """Upsert the first min(N, cap) chunks through the provider, batches of 100."""
    n = min(row.n, cap)
    data = Data(str(data_root), n)
    db = work / "http-build.db"
    spent: list[float] = []
    with ratatoskr_server(["--plane", "memory"], server_env(db), str(work)) as server:
        client = http_client(server.base_url)
        try:
            for b, rows in enumerate(data.batches()):
                records = [
                    {
                        "id": data.chunk_id(i),
                        "embedding": data.vectors[i].tolist(),
                        "scope": data.scope(i),
                        "content": data.content(i),
                        "distillate": data.distillate(i),
                        "origin": "conversation",
                    }
                    for i in rows
                ]
                t0 = time.perf_counter()
                client.upsert_many(records, idempotency_key=f"h{b}")
                spent.append(time.perf_counter() - t0)
        finally:
            client.close()
    row.upsert_rate = n / sum(spent)
    row.upsert_batch_p50 = p50(spent)
    if n < row.n:
        row.upsert_note = f"first {n:,} chunks"
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)


def http_serve(row: Row, data_root: Path, db: Path, work: Path, stage: Stage) -> None:
    """Searches through ``ratatoskr serve`` over the store the direct run built, then load."""
    data = Data(str(data_root), row.n)
    t0 = time.perf_counter()
    with ratatoskr_server(["--plane", "memory"], server_env(db), str(work)) as server:
        client = http_client(server.base_url)
        try:

            def search(q: np.ndarray, mode: str, sel: int) -> list[int]:
                grant = scope_filter(mode, sel)
                client.scope = dict(grant or {})  # the token's grant is the searched scope
                hits = client.search(
                    q.tolist(), top_k=TOP_K, scope_all=grant, include={"embedding": False}
                )
                return [Data.row_of(h["chunk_id"]) for h in hits]

            q0, s0 = data.queries("unfiltered")
            t1 = time.perf_counter()
            search(q0[0], "unfiltered", int(s0[0]))
            serve: dict[str, Any] = {"open_s": t1 - t0, "first_search_s": time.perf_counter() - t1}
            serve["modes"] = {}
            for mode in MODES:
                qs, sels = data.queries(mode)
                qs, sels = qs[: stage.queries], sels[: stage.queries]

                def one(j: int, _tag: str, m: str = mode, q: Any = qs, s: Any = sels) -> list[int]:
                    return search(q[j], m, int(s[j]))

                serve["modes"][mode] = timed_queries(
                    one, len(qs), stage.mode_budget_s, stage.min_queries
                )
        finally:
            client.close()
        proc = psutil.Process(server.pid)
        cpu0 = sum(proc.cpu_times()[:2])
        with PySpy(server.pid, work / "server-profile.txt") as spy:
            row.extra["load"] = run_load(server.base_url, data_root, row.n, stage)
        row.extra["load"]["server_cpu_s"] = sum(proc.cpu_times()[:2]) - cpu0
        row.extra["server_profile"] = spy.summary()
        serve["vmhwm_mb"] = read_vmhwm(server.pid)
    fill_serve(row, serve, data_root)


class PySpy:
    """py-spy (bench group) sampling the server during the load test, if it can attach."""

    # Inclusive shares of the busy samples; a stack may count in several. py-spy names a
    # frame "qualname (path:line)" with the path cut below the namespace package
    # ("memory/store.py" for ratatoskr/memory/store.py), so the parts are matched by the
    # path's start: a class's qualname is where the method is defined (RatatoskrMemoryStore
    # is an alias), and the runs of 2026-12-01/02 matched names that no longer existed.
    PIPELINE = "_pipeline ("
    FRONT = ("(provider/front.py", "(bifrost/consumer/", "(starlette/")
    PARTS = (
        ("bifrost's request pipeline in its pool thread, in all (`_pipeline`)", (PIPELINE,)),
        ("… the memory store (`ratatoskr.memory`: search, index, rows)", ("(memory/",)),
        ("… … of which fetching the hits' rows (`ratatoskr.memory.rows`)", ("(memory/rows.py",)),
        ("… envelope parse and checks (`parse_envelope`)", ("parse_envelope (",)),
        (
            "… token verification and the token cache (`bifrost.auth`, the replay file)",
            ("(bifrost/auth/", "(sqlite/token_cache.py"),
        ),
    )
    FRONT_LABEL = "the ASGI front and the plane endpoint on the event loop (outside the pipeline)"
    RATE = 250
    # Leaves where a thread waits (py-spy counts some of these as busy).
    IDLE = ("Condition.wait", "Runner.run (", "Queue.get", "WorkerThread.run (", "select (")

    def __init__(self, pid: int, out: Path) -> None:
        self.pid, self.out = pid, out
        self.proc: subprocess.Popen[bytes] | None = None
        exe = Path(sys.executable).with_name("py-spy")
        self.exe = str(exe) if exe.exists() else shutil.which("py-spy")

    def __enter__(self) -> PySpy:
        if self.exe:
            self.proc = subprocess.Popen(
                [
                    *(self.exe, "record", "-p", str(self.pid), "-o", str(self.out)),
                    *("--format", "raw", "--rate", str(self.RATE), "--nonblocking", "--gil"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def summary(self) -> dict[str, float]:
        """Inclusive share per part of the samples of the thread holding the GIL."""
        if not self.out.exists():
            return {}
        counts: dict[str, int] = {label: 0 for label, _ in self.PARTS}
        counts[self.FRONT_LABEL] = 0
        total = rest = 0
        for line in self.out.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            if not n.isdigit() or stack.rsplit(";", 1)[-1].startswith(self.IDLE):
                continue
            total += int(n)
            for label, marks in self.PARTS:
                if any(m in stack for m in marks):
                    counts[label] = counts.get(label, 0) + int(n)
            if self.PIPELINE in stack:
                continue
            if any(m in stack for m in self.FRONT):
                counts[self.FRONT_LABEL] = counts.get(self.FRONT_LABEL, 0) + int(n)
            else:
                rest += int(n)
        counts["uvicorn's HTTP protocol, asyncio, thread hand-off (the rest)"] = rest
        shares = {k: v / total for k, v in counts.items()} if total else {}
        if total:
            shares["_busy_s"] = total / self.RATE
        return shares


def run_load(url: str, data_root: Path, n: int, stage: Stage) -> dict[str, Any]:
    """8 concurrent clients in a second process, one-tenant searches, bounded in time."""
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--load",
        url,
        "--data",
        str(data_root),
        "--n",
        str(n),
        "--seconds",
        str(stage.load_seconds),
        "--max-requests",
        str(stage.load_max_requests),
    ]
    env = {**os.environ, "BENCH_HEIMDALL_KEY": HEIMDALL_KEY}
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=stage.load_seconds + 120, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError("load generator failed: " + proc.stderr[-500:])
    figures: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return figures


async def _load(
    url: str, data_root: str, n: int, seconds: float, max_requests: int
) -> dict[str, Any]:
    from bifrost.client import AsyncBifrostClient  # noqa: PLC0415

    key = os.environ["BENCH_HEIMDALL_KEY"].encode()
    data = Data(data_root, n)
    qs, sels = data.queries("tenant")
    qlists = [q.tolist() for q in qs]
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds
    budget = [max_requests]

    async def worker(w: int) -> None:
        nonlocal errors
        client = AsyncBifrostClient(url, key, actor=f"load-{w}", plane="memory")
        rnd = random.Random(w)
        try:
            while time.perf_counter() < deadline and budget[0] > 0:
                budget[0] -= 1
                j = rnd.randrange(len(qlists))
                grant = {"tenant": f"t{int(sels[j]):02d}"}
                client.scope = grant
                t = time.perf_counter()
                try:
                    await client.search(
                        qlists[j], top_k=TOP_K, scope_all=grant, include={"embedding": False}
                    )
                except Exception:
                    errors += 1
                latencies.append(time.perf_counter() - t)
        finally:
            await client.aclose()

    start = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(CLIENTS)))
    wall = time.perf_counter() - start
    return {
        "requests": len(latencies),
        "errors": errors,
        "wall_s": wall,
        "rps": len(latencies) / wall,
        "p50": p50(latencies),
        "p99": p99(latencies),
    }


# -- the run -----------------------------------------------------------------------------


def run_all(args: argparse.Namespace, prof: Profile) -> tuple[list[Row], list[Any], str]:
    work = Path(args.workdir or HERE / "data" / f"run-{os.getpid()}")
    data_root = HERE / "data" / f"vectors-{DIM}-{max(prof.sizes)}-{args.seed}"
    rows: list[Row] = []
    contenders = [c for c in ORDER if not args.only or c in args.only.split(",")]
    steps = 1 + sum(2 for _ in prof.sizes for _ in contenders) + (0 if args.no_vmp else 1)
    vmp_results: list[Any] = []
    with progress(steps, f"bench ({prof.name})", not args.no_progress) as bar:
        bar.set_description_str("generating data")
        make_data(data_root, prof, args.seed)
        bar.update(1)
        for stage in prof.stages:
            n = stage.n
            store_root = work / str(n)
            shutil.rmtree(store_root, ignore_errors=True)
            for contender in contenders:
                row = Row(contender, n)
                rows.append(row)
                bar.set_description_str(f"N={n:,} {contender}")
                if contender == "reference" and n > prof.reference_max_n:
                    row.error = f"not run above {prof.reference_max_n:,} (pure Python)"
                    bar.update(2)
                    continue
                store = store_root / contender
                store.mkdir(parents=True, exist_ok=True)
                began = time.perf_counter()
                try:
                    run_contender(row, contender, data_root, store, store_root, args, stage)
                except subprocess.TimeoutExpired as exc:
                    row.error = f"did not finish within {exc.timeout:.0f} s"
                except Exception as exc:
                    text = " / ".join(str(exc).split("\n"))
                    row.error = f"{type(exc).__name__}: {text}"[:400].replace("|", "/")
                row.extra["wall_s"] = time.perf_counter() - began
                bar.update(2)
                if contender not in ("ratatoskr",):
                    shutil.rmtree(store, ignore_errors=True)
            db = store_root / "ratatoskr" / "memory.db"
            if n == max(prof.sizes) and db.exists():
                bar.set_description_str(f"N={n:,} profiling ratatoskr")
                began = time.perf_counter()
                PROFILE.update(profile_ratatoskr(db, data_root, n, store_root))
                PROFILE["wall_s"] = time.perf_counter() - began
            shutil.rmtree(store_root, ignore_errors=True)
        if not args.no_vmp:
            bar.set_description_str("VMP plane")
            from vmp_bench import run_vmp  # noqa: PLC0415

            began = time.perf_counter()
            vmp_results = run_vmp(
                prof.vmp_n, prof.vmp_m, prof.vmp_q, (16, 384), args.seed, None, False
            )
            VMP_WALL_S.append(time.perf_counter() - began)
            bar.update(1)
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return rows, vmp_results, str(data_root)


PROFILE: dict[str, Any] = {}
VMP_WALL_S: list[float] = []


def profile_ratatoskr(db: Path, data_root: Path, n: int, work: Path) -> dict[str, Any]:
    out = work / "profile.json"
    cmd = [sys.executable, str(HERE / "profile_ratatoskr.py"), "--store", str(db)]
    cmd += ["--data", str(data_root), "--n", str(n), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        return {"error": proc.stderr[-400:]}
    return dict(json.loads(out.read_text()))


def run_contender(
    row: Row,
    contender: str,
    data_root: Path,
    store: Path,
    store_root: Path,
    args: argparse.Namespace,
    stage: Stage,
) -> None:
    python = sys.executable
    if contender == "langgraph":
        python = args.peer_python
        if not python or not Path(python).exists():
            raise RuntimeError(f"no peer interpreter at {python!r} (make bench builds it)")
    if contender == "ratatoskr-http":
        http_build(row, data_root, store, stage.http_upsert_cap)
        db = store_root / "ratatoskr" / "memory.db"
        if not db.exists():
            raise RuntimeError("the direct ratatoskr store was not built")
        http_serve(row, data_root, db, store, stage)
        return
    if contender == "reference":
        res = run_worker(python, "both", contender, data_root, row.n, store, stage)
        fill_build(row, res["build"])
        fill_serve(row, res["serve"], data_root)
        row.reopen_s = float("nan")  # nothing to reopen: it lives in memory
        return
    built = run_worker(python, "build", contender, data_root, row.n, store, stage)
    fill_build(row, built["build"])
    row.extra["build_wall_s"] = built["build"].get("build_wall_s")
    served = run_worker(python, "serve", contender, data_root, row.n, store, stage, row.loaded)
    fill_serve(row, served["serve"], data_root)


# -- report ------------------------------------------------------------------------------


def ratio(value: float, base: float) -> str:
    if not (value == value and base == base) or base == 0:
        return ""
    r = value / base
    return f" ({r:.2f}×)" if r < 10 else f" ({r:,.0f}×)"


def behind(row: Row, base: Row) -> list[str]:
    """The measures where ``row`` beats ratatoskr's store API."""
    out = []
    if row.upsert_rate > base.upsert_rate:
        durable = row.extra.get("durable_rate")
        if durable is not None and durable <= base.upsert_rate:
            out.append("upsert (not durable; behind once fsync'd)")
        else:
            out.append("upsert")
    if row.write_bytes_per_chunk < base.write_bytes_per_chunk:
        out.append("bytes written")
    for mode in MODES:
        if (
            mode in row.search
            and mode in base.search
            and row.search[mode][0] < base.search[mode][0]
        ):
            out.append(f"search {mode_label(mode)} p50")
    if row.reopen_s < base.reopen_s:
        out.append("reopen")
    if row.rss_mb < base.rss_mb:
        out.append("RSS")
    return out


def mode_label(mode: str) -> str:
    return {"unfiltered": "unfiltered", "tenant": "1%", "group": "10%"}[mode]


def table(rows: list[Row], n: int) -> list[str]:
    these = [r for r in rows if r.n == n]
    base = next((r for r in these if r.contender == "ratatoskr" and not r.error), None)
    lines = [
        f"### N = {n:,} chunks",
        "",
        "| contender | upsert, batches of 100 (chunks/s) | KB written per chunk"
        " | search p50 / p99 ms: unfiltered"
        " | 1% (one tenant) | 10% (one group) | recall@10 (unf. / 1% / 10%) | reopen s"
        " | peak RSS MB | ratatoskr behind on |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in these:
        if r.error:
            lines.append(f"| {LABELS[r.contender]} | {r.error} | | | | | | | | |")
            continue
        b = base if base is not None and r is not base else None
        wrote = "—"
        if r.write_bytes_per_chunk == r.write_bytes_per_chunk:
            wrote = f"{r.write_bytes_per_chunk / 1024:,.1f}"
            if b:
                wrote += ratio(r.write_bytes_per_chunk, b.write_bytes_per_chunk)
        up = (
            "—"
            if r.upsert_note == "—" or r.upsert_rate != r.upsert_rate
            else f"{r.upsert_rate:,.0f}"
        )
        if b and r.upsert_note != "—":
            up += ratio(r.upsert_rate, b.upsert_rate)
        if r.upsert_note and r.upsert_note != "—":
            up += f" ({r.upsert_note})"
        if "durable_rate" in r.extra:
            durable = r.extra["durable_rate"]
            up += f"; {durable:,.0f} fsync'd" + (ratio(durable, b.upsert_rate) if b else "")
        if r.loaded:
            up += f" ({time_boxed(r)}; every other column: over those chunks)"
        cells = []
        for mode in MODES:
            if mode not in r.search:
                cells.append("")
                continue
            a, z = r.search[mode]
            cell = f"{fmt_ms(a)} / {fmt_ms(z)}"
            if b and mode in b.search:
                cell += ratio(a, b.search[mode][0])
            ran, planned = r.queries.get(mode, (0, 0))
            if ran < planned:
                cell += f" [{ran}/{planned}]"
            cells.append(cell)
        rec = " / ".join(f"{r.recall.get(m, float('nan')):.3f}" for m in MODES)
        reopen = "—" if r.reopen_s != r.reopen_s else f"{r.reopen_s:.2f}"
        if b and r.reopen_s == r.reopen_s:
            reopen += ratio(r.reopen_s, b.reopen_s)
        rss = f"{r.rss_mb:,.0f}" + (ratio(r.rss_mb, b.rss_mb) if b else "")
        lag = ", ".join(behind(r, b)) if b else ""
        lines.append(
            f"| {LABELS[r.contender]} | {up} | {wrote} | {cells[0]} | {cells[1]} | {cells[2]}"
            f" | {rec}"
            f" | {reopen} | {rss} | {lag or '—'} |"
        )
    lines.append("")
    return lines


def time_boxed(r: Row) -> str:
    """'time-boxed: loaded 310,000 of 1,000,000 in 180 s (1,722 chunks/s)'."""
    box = r.extra.get("time_boxed") or {}
    secs = float(box.get("load_s") or float("nan"))
    rate = f" ({r.loaded / secs:,.0f} chunks/s)" if secs == secs and secs > 0 else ""
    return f"time-boxed: loaded {r.loaded:,} of {r.n:,} in {secs:,.0f} s{rate}"


def load_table(rows: list[Row]) -> list[str]:
    lines = [
        f"| N | requests/s ({CLIENTS} clients, one-tenant searches) | p50 ms | p99 ms"
        " | requests | errors | server peak RSS MB |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        load = r.extra.get("load")
        if r.contender != "ratatoskr-http" or not load:
            continue
        lines.append(
            f"| {r.n:,} | {load['rps']:,.0f} | {fmt_ms(load['p50'])} | {fmt_ms(load['p99'])}"
            f" | {load['requests']:,} | {load['errors']} | {r.rss_mb:,.0f} |"
        )
    return [*lines, ""]


def notes(rows: list[Row]) -> list[str]:
    out = []
    for r in rows:
        if r.loaded:
            budget = (r.extra.get("time_boxed") or {}).get("budget_s")
            out.append(
                f"- {LABELS[r.contender]} at N = {r.n:,}: {time_boxed(r)} (its loading"
                f" budget: {budget or 0:,.0f} s); it was not given the whole hour a full load"
                " would take here. Its searches, recall (against a float64 brute force over"
                " the same first chunks), reopen and RSS are those of the chunks it holds,"
                f" so its ratios to ratatoskr's {r.n:,} compare a smaller store."
            )
        if "bulk_rate" in r.extra:
            out.append(
                f"- {LABELS[r.contender]} at N = {r.n:,}: the first {r.extra['bulk_rows']:,}"
                " chunks went in through its bulk path at"
                f" {r.extra['bulk_rate']:,.0f} chunks/s (not timed as"
                " upserts); the upsert rate is that of the last chunks, in batches of 100."
            )
        if r.contender == "lancedb" and "optimize_s" in r.extra:
            index = r.extra.get("vector_index_s")
            abandoned = r.extra.get("vector_index_abandoned_s")
            if index is not None:
                ann = f"the IVF_PQ index {index:.1f} s"
            elif abandoned:
                ann = (
                    f"the IVF_PQ index was abandoned after {abandoned:,.0f} s, its time box"
                    " (250k rows took 140 s here), so it searched with LanceDB's flat exact"
                    " scan"
                )
            else:
                ann = "no ANN index (its docs: none needed up to ~100k rows; flat exact scan)"
            out.append(
                f"- LanceDB at N = {r.n:,}: after the load, `optimize()` took"
                f" {r.extra['optimize_s']:.1f} s; {ann}; the two BITMAP indexes"
                f" {r.extra['scalar_index_s']:.1f} s (none of it in the upsert rate)."
            )
    return out


def plots(rows: list[Row], stem: Path) -> list[str]:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    written = []
    sizes = sorted({r.n for r in rows})
    by = {c: [r for r in rows if r.contender == c and not r.error] for c in ORDER}

    def series(c: str, get: Any) -> tuple[list[int], list[float]]:
        xs, ys = [], []
        for r in by[c]:
            v = get(r)
            if v == v and v is not None:
                xs.append(r.n)
                ys.append(v)
        return xs, ys

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, mode in zip(axes, MODES, strict=True):
        for c in ORDER:
            xs, ys = series(c, lambda r, m=mode: r.search[m][0] * 1e3 if m in r.search else None)
            if xs:
                ax.plot(xs, ys, marker="o", label=LABELS[c], color=COLORS[c])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(sizes, [f"{s:,}" for s in sizes])
        ax.set_title(f"search p50, {mode_label(mode)} of the chunks")
        ax.set_xlabel("chunks in the store")
        ax.set_ylabel("ms")
        ax.grid(True, which="both", alpha=0.3)
    legend(fig, axes)
    path = stem.with_name(stem.name + "-search.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path.name)

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    getters = [
        ("upsert throughput, batches of 100", "chunks/s", lambda r: r.upsert_rate),
        ("reopen (open + first search)", "s", lambda r: r.reopen_s),
        ("peak RSS of the serving process", "MB", lambda r: r.rss_mb),
    ]
    for ax, (title, unit, get) in zip(axes, getters, strict=True):
        for c in ORDER:
            xs, ys = series(c, get)
            if xs:
                ax.plot(xs, ys, marker="o", label=LABELS[c], color=COLORS[c])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(sizes, [f"{s:,}" for s in sizes])
        ax.set_title(title)
        ax.set_xlabel("chunks in the store")
        ax.set_ylabel(unit)
        ax.grid(True, which="both", alpha=0.3)
    legend(fig, axes)
    path = stem.with_name(stem.name + "-costs.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path.name)
    return written


def profile_section(rows: list[Row]) -> list[str]:
    from profile_ratatoskr import markdown as profile_markdown  # noqa: PLC0415

    lines = ["### Where ratatoskr's time goes (profiles from this run)", ""]
    for r in rows:
        prof = dict(r.extra.get("server_profile") or {})
        load: dict[str, Any] = dict(r.extra.get("load") or {})
        if r.contender == "ratatoskr-http" and prof:
            prof.pop("_busy_s", None)
            cpu = load.get("server_cpu_s") if load else None
            per = (
                f" ({cpu / load['requests'] * 1e3:.1f} ms of server CPU per request, user +"
                f" system, for {load['rps']:.0f} requests/s)"
                if cpu and load.get("requests")
                else ""
            )
            lines += [
                f"**Provider server under the load test at N = {r.n:,}**{per} — where its"
                " Python time goes: inclusive share of py-spy samples of the thread holding"
                " the GIL (`--gil`; C code that releases the GIL, such as SQLite reads and"
                " BLAS, is not counted):",
                "",
                "| part | share |",
                "| --- | --- |",
                *[f"| {k} | {v * 100:.0f}% |" for k, v in prof.items()],
                "",
            ]
    if PROFILE.get("error"):
        lines.append(f"(store profile failed: {PROFILE['error']})")
    elif PROFILE:
        lines += profile_markdown(PROFILE)
    return lines if len(lines) > 2 else []


def legend(fig: Any, axes: Any) -> None:
    """One legend under the panels, every contender that appears in any of them."""
    handles: dict[str, Any] = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=len(handles))
    fig.tight_layout(rect=(0, 0.08, 1, 1))


def versions_line(peer_python: str | None) -> str:
    from ratatoskr.sqlite import driver_versions, sqlite_vec_version  # noqa: PLC0415

    v = driver_versions()
    parts = [
        f"ratatoskr-memory {version_of('ratatoskr-memory')}",
        f"apsw {v['apsw']}",
        f"SQLite {v['sqlite']}",
        f"sqlite-vec {sqlite_vec_version()}",
        f"numpy {np.__version__}",
        f"chromadb {version_of('chromadb')}",
        f"lancedb {version_of('lancedb')}",
        f"valoricore {version_of('valoricore')}",
    ]
    if peer_python and Path(peer_python).exists():
        probe = (
            "import importlib.metadata as m, platform, sqlite3;"
            "print(platform.python_version(), sqlite3.sqlite_version,"
            " m.version('langgraph-checkpoint-sqlite'), m.version('sqlite-vec'))"
        )
        out = subprocess.run(
            [peer_python, "-c", probe], capture_output=True, text=True, check=False
        )
        if out.returncode == 0:
            py, sq, lg, sv = out.stdout.split()
            parts.append(
                f"langgraph-checkpoint-sqlite {lg} (Python {py}, SQLite {sq}, sqlite-vec {sv})"
            )
    return ", ".join(parts)


def stages_line(prof: Profile) -> str:
    """How many queries each size ran per mode, and the time boxes of the run."""
    parts = []
    for st in prof.stages:
        part = f"N = {st.n:,}: up to {st.queries} queries per search mode"
        if st.mode_budget_s:
            part += (
                f" or {st.mode_budget_s:g} s of them, whichever first (at least"
                f" {min(st.min_queries, st.queries)}; a cell marked [k/{st.queries}] ran k)"
            )
        if st.build_budget_s:
            boxes = ", ".join(f"{LABELS[c]} {b:,.0f} s" for c, b in st.build_budget_s)
            part += f"; loading time-boxed for {boxes}"
        parts.append(part)
    return "; ".join(parts)


def report(
    rows: list[Row], vmp: list[Any], prof: Profile, args: argparse.Namespace, seconds: float
) -> Path:
    from vmp_bench import header as vmp_header  # noqa: PLC0415
    from vmp_bench import markdown as vmp_markdown  # noqa: PLC0415

    today = dt.date.today().isoformat()
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / (today if prof.name == "quick" else f"{today}-full")
    lines = [
        f"# Side-by-side benchmark — {today} ({prof.name} profile)",
        "",
        f"Machine: {machine_line()}.",
        f"Versions: {versions_line(args.peer_python)}.",
        f"Data: {DIM}-dim unit vectors (clustered), 100 tenants × 10 end users in 10 groups;"
        f" top_k {TOP_K}; {stages_line(prof)} (80% near a stored in-scope"
        " vector, 20% random). Every contender in processes of its own; one run, same data;"
        " OPENBLAS_NUM_THREADS=1 everywhere."
        f" Run took {seconds / 60:.1f} min; load average {args.load_before:.2f} at the start,"
        f" {args.load_after:.2f} at the end (2 cores).",
        f"Reproduce: `make {'bench' if prof.name == 'quick' else 'bench-full'}`.",
        "",
        "Ratios in parentheses are contender ÷ ratatoskr's store API: above 1× is slower"
        " (or bigger) than ratatoskr for latency, reopen and RSS; below 1× is slower for"
        " upsert throughput. The last column names every measure on which the contender"
        " beats ratatoskr's store API. KB written per chunk: what the contender's process"
        " caused to be written to storage (`write_bytes` of /proc/self/io: WAL, checkpoint,"
        " files rewritten) during its timed batches, divided by the chunks in them.",
        "",
    ]
    for n in sorted({r.n for r in rows}):
        lines += table(rows, n)
    lines += [
        "### Provider under load (HTTP, loopback, load from a second process)",
        "",
        *load_table(rows),
        *notes(rows),
        "",
    ]
    lines += profile_section(rows)
    if vmp:
        lines += [
            "### VMP plane: ratatoskr.vmp vs valoricore (local mode)",
            "",
            *vmp_header(prof.vmp_n, prof.vmp_m, prof.vmp_q),
            "",
            *vmp_markdown(vmp),
            "",
        ]
    pngs = plots(rows, stem)
    lines += [f"![{p}]({p})" for p in pngs]
    path = stem.with_suffix(".md")
    path.write_text("\n".join(lines) + "\n")
    if args.update_readme:
        update_readme(lines, f"{out_dir.name}/" if out_dir.parent == HERE else "", prof.name)
    return path


README_START = "<!-- side-by-side results: written by compare.py --update-readme -->"
README_END = "<!-- end of side-by-side results -->"
# The full profile's block (1M) sits after the quick one's; the first full run adds it.
README_FULL_START = "<!-- 1M results: written by compare.py --profile full --update-readme -->"
README_FULL_END = "<!-- end of 1M results -->"


def update_readme(lines: list[str], image_prefix: str, profile: str = "quick") -> None:
    """Replace the marked block of benchmarks/README.md with this run's tables: the
    quick profile's block for `make bench`, the full profile's (added after the quick
    one's the first time) for `make bench-full`, so neither overwrites the other."""
    readme = HERE / "README.md"
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        return
    if profile != "quick":
        if README_FULL_START not in text or README_FULL_END not in text:
            text = text.replace(
                README_END, f"{README_END}\n\n{README_FULL_START}\n{README_FULL_END}", 1
            )
        start, end = README_FULL_START, README_FULL_END
    else:
        start, end = README_START, README_END
    body = []
    for line in lines[1:]:  # the title becomes the README's own heading
        out = line
        if line.startswith("![") and "](" in line:
            name = line.split("](", 1)[1].rstrip(")")
            out = line.replace(f"]({name})", f"]({image_prefix}{name})")
        body.append(out.replace("### ", "#### "))
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    readme.write_text(head + start + "\n" + "\n".join(body).strip() + "\n" + end + tail)


def custom_profile(prof: Profile, args: argparse.Namespace) -> Profile:
    """The profile with --sizes, --queries and --budget-scale applied. A size the
    profile does not have runs its largest stage's settings (so ``--profile full
    --sizes 20000 --budget-scale 0.02`` rehearses the 1M time boxes in a minute)."""
    stages = list(prof.stages)
    if args.sizes:
        by_n = {st.n: st for st in prof.stages}
        stages = [
            by_n.get(n, dataclasses.replace(prof.stages[-1], n=n))
            for n in (int(x) for x in args.sizes.split(","))
        ]
    if args.queries:
        stages = [dataclasses.replace(st, queries=args.queries) for st in stages]
    if args.budget_scale != 1.0:
        f = args.budget_scale
        stages = [
            dataclasses.replace(
                st,
                mode_budget_s=st.mode_budget_s * f,
                load_seconds=max(1.0, st.load_seconds * f),
                build_budget_s=tuple((c, b * f) for c, b in st.build_budget_s),
            )
            for st in stages
        ]
    return dataclasses.replace(prof, stages=tuple(stages))


def main() -> int:
    # One BLAS thread in every process of the run (this one, the contenders, the
    # server, the load generator): on 2 shared cores OpenBLAS's second thread
    # turned sub-millisecond matrix-vector products into 3–8 ms waits, and one
    # thread is as fast on the memory-bound 100k product. Set before numpy loads.
    if os.environ.get("OPENBLAS_NUM_THREADS") != "1":
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--profile", choices=["quick", "full"], default="quick")
    parser.add_argument("--peer-python", default=str(HERE / ".venv-peers" / "bin" / "python"))
    parser.add_argument("--only", help="comma-separated contenders (default: all)")
    parser.add_argument("--sizes", help="comma-separated N (default: the profile's)")
    parser.add_argument("--queries", type=int, help="queries per search mode")
    parser.add_argument("--no-vmp", action="store_true", help="skip the VMP section")
    parser.add_argument(
        "--budget-scale",
        type=float,
        default=1.0,
        help="multiply every time box (loading, queries, load test): dry runs",
    )
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--seed", type=int, default=20240611)
    parser.add_argument("--workdir", help="where stores are built (kept); default a temp dir")
    parser.add_argument("--out-dir", default=str(HERE / "results"))
    parser.add_argument(
        "--update-readme", action="store_true", help="put the tables into benchmarks/README.md"
    )
    parser.add_argument("--report-from", help="re-render the report of a saved raw-*.json")
    parser.add_argument("--load", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--max-requests", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load:
        res = asyncio.run(_load(args.load, args.data, args.n, args.seconds, args.max_requests))
        print(json.dumps(res))
        return 0
    prof = custom_profile(QUICK if args.profile == "quick" else FULL, args)
    if args.report_from:  # re-render a saved run (e.g. after a failed report)
        saved = json.loads(Path(args.report_from).read_text())
        rows = [Row(**r) for r in saved["rows"]]
        vmp = [DimResult(**d) for d in saved["vmp"]]
        PROFILE.update(saved["profile"])
        args.load_before = saved["load_before"]
        args.load_after = saved["load_after"]
        path = report(rows, vmp, prof, args, saved["seconds"])
    else:
        started = time.perf_counter()
        args.load_before = os.getloadavg()[0]
        rows, vmp, _ = run_all(args, prof)
        seconds = time.perf_counter() - started
        args.load_after = os.getloadavg()[0]
        raw = Path(args.out_dir) / f"raw-{prof.name}-{os.getpid()}.json"
        raw.parent.mkdir(parents=True, exist_ok=True)
        raw.write_text(
            json.dumps(
                {
                    "rows": [r.__dict__ for r in rows],
                    "vmp": [d.__dict__ for d in vmp],
                    "profile": PROFILE,
                    "load_before": args.load_before,
                    "load_after": args.load_after,
                    "seconds": seconds,
                },
                default=str,
            )
        )
        path = report(rows, vmp, prof, args, seconds)
        raw.replace(path.with_suffix(".json"))  # the numbers behind the tables and plots
    print(path.read_text())
    print(f"written to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
