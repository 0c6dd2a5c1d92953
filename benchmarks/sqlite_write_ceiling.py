"""The write ceiling of SQLite itself for memory-plane rows, by synchronous mode.

Each transaction inserts 100 chunk rows (~8 KB of JSON: a 384-float embedding
plus a little content) and their 100 vec0 rows, through ratatoskr.sqlite's
Database — the same shape as one `upsert_many` batch, without validation,
digest, index or ledger. Shows where the memory plane's upsert time goes.

    .venv/bin/python benchmarks/sqlite_write_ceiling.py [--batches 50]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import orjson

from ratatoskr.sqlite import ConnectionOptions, Database, Migration

SCHEMA = (
    "CREATE TABLE c(id TEXT PRIMARY KEY, j TEXT, seq INT); CREATE INDEX cs ON c(seq);"
    "CREATE VIRTUAL TABLE v USING vec0(id TEXT PRIMARY KEY, e float[384] distance_metric=cosine)"
)


def run(sync: str, batches: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        db = Database(
            os.path.join(d, "x.db"),
            plane="t",
            migrations=[Migration(1, "x", SCHEMA)],
            options=ConnectionOptions(load_vec=True, synchronous=sync),
        )
        rng = np.random.default_rng(0)
        rows_t = vec_t = total = 0.0
        for b in range(batches):
            vs = rng.standard_normal((100, 384)).astype(np.float32)
            rows = [
                (
                    f"{b}-{i}",
                    orjson.dumps(
                        {"embedding": vs[i].astype(float).tolist(), "c": "x" * 200}
                    ).decode(),
                    b,
                )
                for i in range(100)
            ]
            t0 = time.perf_counter()
            with db.write() as conn:
                t1 = time.perf_counter()
                conn.executemany("INSERT INTO c VALUES (?,?,?)", rows)
                t2 = time.perf_counter()
                conn.executemany(
                    "INSERT INTO v(id, e) VALUES (?,?)",
                    [(r[0], vs[i].tobytes()) for i, r in enumerate(rows)],
                )
                t3 = time.perf_counter()
            total += time.perf_counter() - t0
            rows_t += t2 - t1
            vec_t += t3 - t2
        db.close()
    per = 1000 / batches
    print(
        f"synchronous={sync}: chunk rows {rows_t * per:.1f} ms/batch, "
        f"vec0 rows {vec_t * per:.1f} ms/batch, "
        f"whole transaction {total * per:.1f} ms/batch -> {100 * batches / total:,.0f} rows/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=50)
    args = parser.parse_args()
    for sync in ("FULL", "NORMAL", "OFF"):
        run(sync, args.batches)


if __name__ == "__main__":
    main()
