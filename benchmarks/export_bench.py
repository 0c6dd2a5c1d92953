"""``ratatoskr export`` / ``import`` of N chunks (384 dims) timed, each way.

Fills a SQLite memory plane with N chunks (10 tenants, 100 end users; batches of
1000), then times, in this process, what the commands run: the export to a file,
the import of that file into a fresh SQLite file, and (with ``--pg DSN``) the
import into PostgreSQL and the export from it. Prints one JSON object.

    .venv/bin/python benchmarks/export_bench.py --chunks 100000 [--pg postgresql://…]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from bifrost.context import DispatchContext
from ratatoskr.memory import open_memory_store
from ratatoskr.provider.export import run_export
from ratatoskr.provider.import_ import run_import
from ratatoskr.provider.settings import Settings

DIM = 384
CTX = DispatchContext(actor="bench", scope={})


def fill(path: str, n: int) -> float:
    rng = random.Random(7)
    store = open_memory_store(path, embedding_dim=DIM)
    started = time.perf_counter()
    try:
        for start in range(0, n, 1000):
            store.upsert_many(
                [
                    {
                        "id": f"chunk-{i:08d}",
                        "embedding": [rng.gauss(0.0, 1.0) for _ in range(DIM)],
                        "scope": {"tenant": f"t{i % 10}", "end_user": f"u{i % 100}"},
                        "content": f"memory number {i}",
                        "n": i,
                    }
                    for i in range(start, min(n, start + 1000))
                ],
                idempotency_key=f"fill-{start}",
                ctx=CTX,
            )
    finally:
        store.close()
    return time.perf_counter() - started


def settings(memory_db: str) -> Settings:
    return Settings(
        memory_db=memory_db,
        affect_db=memory_db + ".affect",
        memory_embedding_dim=DIM,
        heimdall_key="bench-key-0123456789abcdef0123456789",
    )


def timed(work: Any) -> float:
    started = time.perf_counter()
    work()
    return round(time.perf_counter() - started, 2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--pg", help="a DSN: import into its database and export from it")
    parser.add_argument("--dir", help="where the files go (default: a temporary directory)")
    args = parser.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="export-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    source = settings(str(base / "source.db"))
    dest = settings(str(base / "dest.db"))
    out, back = str(base / "memory.jsonl"), str(base / "memory.pg.jsonl")
    result: dict[str, Any] = {"chunks": args.chunks, "dim": DIM}
    result["fill_s"] = round(fill(source.memory_db, args.chunks), 1)
    result["export_sqlite_s"] = timed(lambda: run_export(source, "memory", out, None))
    result["file_mb"] = round(os.path.getsize(out) / 2**20, 1)
    result["import_sqlite_s"] = timed(lambda: run_import(dest, "memory", out, "fail"))
    result["reimport_sqlite_s"] = timed(lambda: run_import(dest, "memory", out, "fail"))
    if args.pg:
        pg = settings(args.pg)
        result["import_postgres_s"] = timed(lambda: run_import(pg, "memory", out, "fail"))
        result["export_postgres_s"] = timed(lambda: run_export(pg, "memory", back, None))
        with open(out, "rb") as a, open(back, "rb") as b:
            a.readline(), b.readline()
            result["equal_after_header"] = a.read() == b.read()
    for key in ("export_sqlite_s", "import_sqlite_s", "import_postgres_s", "export_postgres_s"):
        if key in result:
            result[key.removesuffix("_s") + "_chunks_per_s"] = round(args.chunks / result[key])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
