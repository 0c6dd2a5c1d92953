"""scan and filtered search on the SQLite memory store (issue 23's targets), one run.

- ``scan`` page of 100 in a 1% scope at N rows (p50);
- ``search`` with a metadata filter of 1% selectivity (of the store) inside a 10%
  scope, beside a scope-only search of the same selectivity (a 1% scope): p50 of
  each, recall against numpy brute force over the filter oracle, result counts.

Run: ``.venv/bin/python benchmarks/filter_bench.py [--rows 100000] [--dim 384]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from bifrost.context import DispatchContext
from bifrost.memory.filters import validate_filter
from ratatoskr.memory import open_memory_store


def p50(f, n: int = 200) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--top-k", type=int, default=10)
    a = ap.parse_args()
    rng = np.random.default_rng(7)
    store = open_memory_store(":memory:", embedding_dim=a.dim, filterable_fields=["metadata.kind"])
    vecs = rng.standard_normal((a.rows, a.dim))
    records = []
    for i in range(a.rows):
        # tenant: 10 tenants of 10% each; end_user: 100 of 1% each; kind: 10 values, so
        # kind k inside one tenant is 1% of the store.
        records.append(
            {
                "id": f"c{i:07d}",
                "embedding": vecs[i].tolist(),
                "scope": {"tenant": f"t{i % 10}", "end_user": f"u{i % 100}"},
                "metadata": {"kind": f"k{(i // 10) % 10}"},
            }
        )
    ctx = DispatchContext(actor="bench")
    t = time.perf_counter()
    for s in range(0, a.rows, 1000):
        store.upsert_many(records[s : s + 1000], idempotency_key=f"b{s}", ctx=ctx)
    print(f"loaded {a.rows} x {a.dim} in {time.perf_counter() - t:.1f} s")

    scope1 = {"tenant": "t3", "end_user": "u3"}  # 1%
    after = [None, "c0050000"]
    print(
        f"scan page of 100, 1% scope: p50 {p50(lambda: store.scan(scope_all=scope1, limit=100, after_id=after[0])):.3f} ms"
        f" (mid-walk {p50(lambda: store.scan(scope_all=scope1, limit=100, after_id=after[1])):.3f} ms;"
        f" without embeddings {p50(lambda: store.scan(scope_all=scope1, limit=100, include={'embedding': False})):.3f} ms)"
    )

    scope10 = {"tenant": "t3"}
    mf = {"metadata.kind": "k5"}
    flt = validate_filter(mf, ["metadata.kind"])
    passing = [i for i, r in enumerate(records) if r["scope"]["tenant"] == "t3" and flt.matches(r)]
    units = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    queries = rng.standard_normal((50, a.dim))
    recall, counts = [], []
    for q in queries:
        got = [
            r["chunk_id"]
            for r in store.search(q.tolist(), top_k=a.top_k, scope_all=scope10, metadata_filter=mf)
        ]
        qs = q / np.linalg.norm(q)
        scores = units[passing] @ qs
        want = {records[passing[j]]["id"] for j in np.argsort(-scores)[: a.top_k]}
        recall.append(len(want & set(got)) / len(want))
        counts.append(len(got))
    qi = iter(np.tile(queries, (20, 1)).tolist())
    filtered = p50(
        lambda: store.search(next(qi), top_k=a.top_k, scope_all=scope10, metadata_filter=mf)
    )
    qi = iter(np.tile(queries, (20, 1)).tolist())
    scoped = p50(lambda: store.search(next(qi), top_k=a.top_k, scope_all=scope1))
    print(
        f"filtered search (1% of store inside a 10% scope, {len(passing)} rows): p50 {filtered:.3f} ms,"
        f" recall {min(recall):.3f} (min over {len(queries)}), counts {set(counts)}"
    )
    print(f"scope-only search (1% scope): p50 {scoped:.3f} ms; ratio {filtered / scoped:.2f}x")
    store.close()


if __name__ == "__main__":
    main()
