"""``ratatoskr export`` / ``import`` of N chunks (384 dims) timed, each way.

Fills a SQLite memory plane with N chunks (10 tenants, 100 end users), then times
what the commands run: the export to a file, the import of that file into a fresh
SQLite file, the same import again (every chunk skipped), and (with ``--pg DSN``)
the import into PostgreSQL and the export from it. Each step runs in a child
process of its own, so its wall time, CPU time and peak RSS are its own (the CPU
figure is what to compare on a loaded host). Prints one JSON object.

The fill writes the source store through its import path in batches of 10,000
(each one transaction; the embeddings drawn by numpy): at 1M chunks, filling by
``upsert_many`` in batches of 1000 takes longer than the benchmark itself.
``--reuse`` keeps a source (and an export file) already at ``--dir``.

    .venv/bin/python benchmarks/export_bench.py --chunks 100000 [--pg postgresql://…]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import tempfile
import time
from collections.abc import Callable
from itertools import zip_longest
from pathlib import Path
from typing import Any

import numpy as np

from bifrost.portability import validate_chunk_import
from ratatoskr.memory import open_memory_store
from ratatoskr.provider.export import run_export
from ratatoskr.provider.import_ import run_import
from ratatoskr.provider.settings import Settings

DIM = 384
FILL_BATCH = 10_000


def fill(path: str, n: int) -> None:
    rng = np.random.default_rng(7)
    store = open_memory_store(path, embedding_dim=DIM)
    now = time.time()
    try:
        for start in range(0, n, FILL_BATCH):
            stop = min(n, start + FILL_BATCH)
            vectors = rng.standard_normal((stop - start, DIM)).tolist()
            entries = [
                {
                    "record": {
                        "id": f"chunk-{i:08d}",
                        "embedding": vectors[i - start],
                        "scope": {"tenant": f"t{i % 10}", "end_user": f"u{i % 100}"},
                        "content": f"memory number {i}",
                        "n": i,
                    },
                    "revision": 1,
                    "written_at": now,
                }
                for i in range(start, stop)
            ]
            batch = validate_chunk_import(entries, embedding_dim=DIM, max_batch=FILL_BATCH)
            store.import_chunks(batch, "fail")
    finally:
        store.close()


def settings(memory_db: str) -> Settings:
    return Settings(
        memory_db=memory_db,
        affect_db=memory_db + ".affect",
        memory_embedding_dim=DIM,
        heimdall_key="bench-key-0123456789abcdef0123456789",
    )


def _child(work: Callable[[], Any], conn: Any) -> None:
    cpu, wall = time.process_time(), time.perf_counter()
    work()
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    conn.send((time.perf_counter() - wall, time.process_time() - cpu, peak_kib))


def step(work: Callable[[], Any]) -> dict[str, float]:
    """``work`` in a forked child: its wall and CPU seconds and peak RSS (MiB)."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(work, child))
    proc.start()
    wall, cpu, peak = parent.recv()
    proc.join()
    if proc.exitcode != 0:
        raise SystemExit(f"a step failed (exit {proc.exitcode})")
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "peak_rss_mib": round(peak / 1024)}


def rates(result: dict[str, float], n: int) -> dict[str, float]:
    return {
        **result,
        "chunks_per_s_wall": round(n / result["wall_s"]),
        "chunks_per_s_cpu": round(n / result["cpu_s"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--pg", help="a DSN: import into its database and export from it")
    parser.add_argument("--dir", help="where the files go (default: a temporary directory)")
    parser.add_argument("--reuse", action="store_true", help="keep a source already at --dir")
    parser.add_argument("--no-sqlite", action="store_true", help="skip the SQLite import")
    parser.add_argument("--no-reimport", action="store_true", help="skip the second import")
    args = parser.parse_args()
    n = args.chunks
    base = Path(args.dir or tempfile.mkdtemp(prefix="export-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    source = settings(str(base / "source.db"))
    dest = settings(str(base / "dest.db"))
    out, back = str(base / "memory.jsonl"), str(base / "memory.pg.jsonl")
    result: dict[str, Any] = {"chunks": n, "dim": DIM}
    if not (args.reuse and os.path.exists(source.memory_db)):
        result["fill"] = step(lambda: fill(source.memory_db, n))
    if not (args.reuse and os.path.exists(out)):
        result["export_sqlite"] = rates(step(lambda: run_export(source, "memory", out, None)), n)
    result["source_db_mib"] = round(os.path.getsize(source.memory_db) / 2**20)
    result["file_mib"] = round(os.path.getsize(out) / 2**20)
    if not args.no_sqlite:
        result["import_sqlite"] = rates(step(lambda: run_import(dest, "memory", out, "fail")), n)
        result["dest_db_mib"] = round(os.path.getsize(dest.memory_db) / 2**20)
        if not args.no_reimport:
            again = step(lambda: run_import(dest, "memory", out, "fail"))
            result["reimport_sqlite"] = rates(again, n)
    if args.pg:
        pg = settings(args.pg)
        result["import_postgres"] = rates(step(lambda: run_import(pg, "memory", out, "fail")), n)
        result["export_postgres"] = rates(step(lambda: run_export(pg, "memory", back, None)), n)
        with open(out, "rb") as a, open(back, "rb") as b:
            a.readline(), b.readline()
            result["equal_after_header"] = all(x == y for x, y in zip_longest(a, b))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
