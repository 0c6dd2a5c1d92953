"""VMP plane benchmark: ``ratatoskr.vmp`` (store directly and over HTTP) against
Valori's own embedded kernel (PyPI ``valoricore``, local mode) on the same VMP
operations — ``upsert_vector`` and ``search_vector`` (k = 10) — at 10k records,
dims 16, 32, 64 and 384 (either side of the index's two prefilter kernels: a BLAS
product over one float32 column per record up to dim 32, simsimd over one row per
record above; both followed by an exact integer re-score of the candidates).

For each dimension, the same unit vectors go into both stores:

- preload N records (ratatoskr: ``upsert_vector`` one by one, VMP v0 has no batch;
  valoricore: ``insert_batch`` of 1,000, its documented bulk path — its
  ``upsert_vector`` slows down as the store grows, see the README);
- time M more ``upsert_vector`` calls (the full VMP operation: record, document
  node, chunk node, PARENT_OF edge) into each store holding N records;
- time ``search_vector`` (k = 10) queries, interleaved between the two in-process
  stores: 80% a stored vector plus noise, 20% random directions; compare the
  returned record ids (ratatoskr's answer is exact); beside them, the floor: numpy
  float32 brute force over the same vectors (one matrix-vector product and an
  ``argpartition``, approximate, no store around it);
- then ``ratatoskr serve --plane vmp`` on the same file (a subprocess on
  127.0.0.1) driven by ``ratatoskr.vmp.client.VmpClient``: M upserts, the searches.

    benchmarks/.venv-bench/bin/python benchmarks/vmp_bench.py            # N = 10k, 4 dims
    benchmarks/.venv-bench/bin/python benchmarks/vmp_bench.py --n 2000 --m 50  # smoke run
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import fmt_ms, machine_line, p50, p99, progress, ratatoskr_server, version_of

from ratatoskr.vmp import open_vmp_store
from ratatoskr.vmp.client import VmpClient

K = 10
API_KEY = "bench-vmp-key-0123456789"  # the provider refuses keys under 16 characters


@dataclass
class DimResult:
    dim: int
    n: int
    m: int
    times: dict[str, list[float]] = field(default_factory=dict)
    preload_s: dict[str, float] = field(default_factory=dict)
    overlap: float = float("nan")
    identical: int = 0
    queries: int = 0
    valori_error: str = ""
    valori_growth: list[tuple[int, float]] = field(default_factory=list)


def make_data(n: int, m: int, q: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed + dim)
    rows = rng.standard_normal((n + 2 * m, dim))
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    queries = np.empty((q, dim))
    for j in range(q):
        if j % 5 == 4:
            v = rng.standard_normal(dim)
        else:
            v = rows[int(rng.integers(0, n))] + 0.1 * rng.standard_normal(dim) / np.sqrt(dim)
        queries[j] = v / np.linalg.norm(v)
    return rows.astype(np.float32).astype(np.float64), queries.astype(np.float32).astype(np.float64)


def open_valori(path: str, dim: int, capacity: int) -> Any:
    """valoricore's VMP client in local (embedded FFI) mode, brute-force index.

    ``ProtocolClient`` takes no ``dim``: the kernel reads ``VALORI_DIM`` and
    ``VALORI_MAX_RECORDS`` when it starts, so they are set around the construction.
    """
    import valoricore  # noqa: PLC0415 - optional: reported, not fatal, when missing

    saved = {k: os.environ.get(k) for k in ("VALORI_DIM", "VALORI_MAX_RECORDS")}
    os.environ["VALORI_DIM"] = str(dim)
    os.environ["VALORI_MAX_RECORDS"] = str(capacity)
    try:
        return valoricore.ProtocolClient(embed=None, path=path, index_kind="bruteforce")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def bench_dim(dim: int, n: int, m: int, q: int, workdir: str, seed: int, bar: Any) -> DimResult:
    res = DimResult(dim, n, m)
    rows, queries = make_data(n, m, q, dim, seed)
    vecs = rows.tolist()
    qs = queries.tolist()
    t = res.times
    for key in ("r_up", "v_up", "h_up", "r_s", "v_s", "h_s", "n_s"):
        t[key] = []

    # -- ratatoskr.vmp, the store called directly ---------------------------------
    path = os.path.join(workdir, f"vmp-{dim}.db")
    store = open_vmp_store(path, dim=dim, max_records=n + 10 * m + 10)
    start = time.perf_counter()
    for i in range(n):
        store.upsert_vector(vecs[i])
        if i % 1000 == 999:
            bar.update(1000)
    res.preload_s["ratatoskr"] = time.perf_counter() - start
    for i in range(n, n + m):
        t0 = time.perf_counter()
        store.upsert_vector(vecs[i])
        t["r_up"].append(time.perf_counter() - t0)
    bar.update(m)

    # -- valoricore, local mode ----------------------------------------------------
    valori = None
    try:
        valori = open_valori(os.path.join(workdir, f"valori-{dim}"), dim, n + 10 * m + 10)
        kernel = valori._memory._db  # the LocalClient; insert_batch is its bulk path
        start = time.perf_counter()
        for s in range(0, n, 1000):
            kernel.insert_batch(vecs[s : min(n, s + 1000)])
            bar.update(min(1000, n - s))
        res.preload_s["valoricore"] = time.perf_counter() - start
        for i in range(n, n + m):
            t0 = time.perf_counter()
            valori.upsert_vector(vecs[i])
            t["v_up"].append(time.perf_counter() - t0)
        bar.update(m)
    except Exception as exc:
        res.valori_error = f"{type(exc).__name__}: {exc}"
        valori = None

    # -- searches, interleaved ------------------------------------------------------
    floor = numpy_floor(rows[: n + m])
    for j, v in enumerate(qs[:5]):
        store.search_vector(v, K)
        floor(queries[j])
        if valori is not None:
            valori.search_vector(v, k=K)
    overlap = 0.0
    for j, v in enumerate(qs):
        t0 = time.perf_counter()
        floor(queries[j])
        t["n_s"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        mine = store.search_vector(v, K)
        t["r_s"].append(time.perf_counter() - t0)
        if valori is not None:
            t0 = time.perf_counter()
            theirs = valori.search_vector(v, k=K)
            t["v_s"].append(time.perf_counter() - t0)
            a = [h.record_id for h in mine]
            b = [h["record_id"] for h in theirs["results"]]
            overlap += len(set(a) & set(b)) / K
            res.identical += a == b
        bar.update(1)
    res.queries = len(qs)
    res.overlap = overlap / len(qs) if valori is not None else float("nan")
    store.close()

    # -- ratatoskr over HTTP (same file, the provider serving only the VMP plane) ----
    env = {
        "RATATOSKR_VMP_DB": path,
        "RATATOSKR_VMP_DIM": str(dim),
        "RATATOSKR_VMP_API_KEY": API_KEY,
        "RATATOSKR_VMP_MAX_RECORDS": str(n + 10 * m + 10),
        "RATATOSKR_LOG_LEVEL": "warning",
    }
    with (
        ratatoskr_server(["--plane", "vmp"], env, workdir) as server,
        VmpClient(server.base_url, api_key=API_KEY) as client,
    ):
        for v in qs[:5]:
            client.search_vector(v, K)
        for i in range(n + m, n + 2 * m):
            t0 = time.perf_counter()
            client.upsert_vector(vecs[i])
            t["h_up"].append(time.perf_counter() - t0)
        bar.update(m)
        for v in qs:
            t0 = time.perf_counter()
            client.search_vector(v, K)
            t["h_s"].append(time.perf_counter() - t0)
            bar.update(1)
    return res


def numpy_floor(rows: np.ndarray) -> Any:
    """numpy float32 brute force over ``rows``: the practical floor of a search, not exact.

    ‖x‖² - 2·x·q ranks like the squared distance; ``argpartition`` then a sort of
    the k picked — what a caller holding the matrix in memory would write.
    """
    matrix = np.ascontiguousarray(rows, dtype=np.float32)
    squares = np.einsum("ij,ij->i", matrix, matrix)

    def search(query: np.ndarray) -> np.ndarray:
        scores = squares - 2.0 * (matrix @ query.astype(np.float32))
        top = np.argpartition(scores, K)[:K]
        return top[np.argsort(scores[top])]

    return search


def run_vmp(
    n: int = 10_000,
    m: int = 200,
    q: int = 200,
    dims: tuple[int, ...] = (16, 32, 64, 384),
    seed: int = 20240611,
    workdir: str | None = None,
    show_progress: bool = True,
) -> list[DimResult]:
    own = workdir is None
    wd = workdir or tempfile.mkdtemp(prefix="vmp-bench-")
    os.makedirs(wd, exist_ok=True)
    total = len(dims) * (2 * n + 3 * m + 2 * q)
    try:
        with progress(total, "vmp", show_progress) as bar:
            out = []
            for dim in dims:
                bar.set_description_str(f"vmp dim {dim}")
                out.append(bench_dim(dim, n, m, q, wd, seed, bar))
            return out
    finally:
        if own:
            shutil.rmtree(wd, ignore_errors=True)


def ratio(a: float, b: float) -> str:
    if not (a == a and b == b) or b == 0:
        return "—"
    return f"{a / b:.2f}×"


def markdown(results: list[DimResult]) -> list[str]:
    lines = [
        "| dim | operation (store holds ~N records) | ratatoskr.vmp store p50 / p99 ms"
        " | ratatoskr over HTTP p50 / p99 ms | valoricore local p50 / p99 ms"
        " | valoricore ÷ ratatoskr store (p50) | numpy float32 floor p50 ms"
        " | ratatoskr store ÷ floor (p50) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        t = r.times
        for op, a, h, v, f in (
            (f"upsert_vector at {r.n:,} records", "r_up", "h_up", "v_up", ""),
            (f"search_vector k={K} at {r.n + r.m:,} records", "r_s", "h_s", "v_s", "n_s"),
        ):
            valori_cell = f"{fmt_ms(p50(t[v]))} / {fmt_ms(p99(t[v]))}" if t[v] else "did not run"
            floor = t.get(f) or []
            lines.append(
                f"| {r.dim} | {op} | {fmt_ms(p50(t[a]))} / {fmt_ms(p99(t[a]))}"
                f" | {fmt_ms(p50(t[h]))} / {fmt_ms(p99(t[h]))} | {valori_cell}"
                f" | {ratio(p50(t[v]), p50(t[a])) if t[v] else '—'}"
                f" | {fmt_ms(p50(floor)) if floor else '—'}"
                f" | {ratio(p50(t[a]), p50(floor)) if floor else '—'} |"
            )
    lines.append("")
    for r in results:
        pre = ", ".join(
            f"{name} {r.n / s:,.0f} records/s" for name, s in r.preload_s.items() if s > 0
        )
        agree = (
            f"valoricore's top-{K} ids overlap ratatoskr's exact answer {r.overlap:.4f}"
            f" (identical lists {r.identical}/{r.queries})"
            if r.overlap == r.overlap
            else f"valoricore did not run: {r.valori_error}"
        )
        lines.append(f"- dim {r.dim}: preload of {r.n:,} records — {pre}; {agree}.")
    return lines


def header(n: int, m: int, q: int) -> list[str]:
    return [
        f"N = {n:,} records preloaded, then {m} timed upserts; {q} searches (k = {K}),"
        " 80% near a stored vector, 20% random; unit vectors.",
        f"Machine: {machine_line()}; valoricore {version_of('valoricore')},"
        f" ratatoskr-vmp {version_of('ratatoskr-vmp')}.",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--m", type=int, default=200, help="timed upserts per store")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dims", default="16,32,64,384")
    parser.add_argument("--seed", type=int, default=20240611)
    parser.add_argument("--out", help="markdown output (default benchmarks/results/vmp-<date>.md)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()
    dims = tuple(int(d) for d in args.dims.split(","))
    started = time.perf_counter()
    results = run_vmp(args.n, args.m, args.queries, dims, args.seed, None, not args.no_progress)
    text = "\n".join(
        [
            f"# VMP plane benchmark — {dt.date.today().isoformat()}",
            "",
            *header(args.n, args.m, args.queries),
            f"Run took {time.perf_counter() - started:.0f} s.",
            "",
            *markdown(results),
        ]
    )
    print(text)
    out = Path(
        args.out
        or Path(__file__).resolve().parent / "results" / f"vmp-{dt.date.today().isoformat()}.md"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    print(f"written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
