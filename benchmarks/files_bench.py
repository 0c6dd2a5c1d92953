"""Bytes on disk and bytes written per chunk: the memory store against LanceDB (issue 28).

Each contender builds a store of N chunks × 384 dims the way ``compare.py`` builds it
(``contenders.py``'s build: the same records, bulk batches first, then the last
``--timed`` chunks in batches of 100), in a process of its own, and reports:

- **on disk per chunk**: every file under the store's folder once the store is closed
  (ratatoskr: the database and its ``-index`` sidecar; LanceDB: its folder after the
  ``optimize()`` and scalar indexes ``compare.py`` gives it), divided by N;
- **written per chunk**: ``write_bytes`` of ``/proc/self/io`` during the timed batches
  (WAL, checkpoints, files), divided by the chunks in them — compare.py's
  "KB written per chunk".

The vectors are unit float32 rows (what a numpy float32 client sends: every element
float32-exact), or with ``--float64`` unit float64 rows (not float32-exact).
``--before DIR`` adds a ratatoskr run with DIR first on ``PYTHONPATH`` (an exported
older ``packages/memory/src``). A contender's table of SQLite pages per chunk
(``dbstat``) is printed too. Byte counts do not depend on the host's load.

    benchmarks/.venv-bench/bin/python benchmarks/files_bench.py [--n 100000] [--float64]
        [--contenders ratatoskr,lancedb] [--before /tmp/old/packages/memory/src]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
DIM = 384


def make_vectors(root: Path, n: int, float64: bool, seed: int) -> None:
    """Clustered unit rows (compare.py's recipe), float32 or float64."""
    if (root / "vectors.npy").exists():
        return
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    dtype = np.float64 if float64 else np.float32
    centres: Any = rng.standard_normal((max(n // 100, 10), DIM)).astype(dtype)
    noise: Any = rng.standard_normal((n, DIM)).astype(dtype)
    block = centres[rng.integers(0, centres.shape[0], n)] + 1.2 * noise
    np.save(root / "vectors.npy", (block / np.linalg.norm(block, axis=1, keepdims=True)))


def measure(contender: str, data: str, n: int, timed: int, store: str) -> dict[str, Any]:
    """In this process: build, close, then size the store (see the module docstring)."""
    sys.path.insert(0, str(HERE))
    from contenders import Data, do_build  # noqa: PLC0415 - the contender's own process

    args = argparse.Namespace(contender=contender, timed_upserts=timed, store=store)
    args.build_budget = 0.0
    out = do_build(args, Data(data, n))
    files = {
        str(p.relative_to(store)): p.stat().st_size for p in Path(store).rglob("*") if p.is_file()
    }
    chunks = n - int(out.get("bulk_rows", 0))
    res: dict[str, Any] = {
        "disk_per_chunk": sum(files.values()) / n,
        "written_per_chunk": out["timed_write_bytes"] / chunks,
        "files": {k: v for k, v in files.items() if not k.startswith("lance")},
    }
    db = Path(store, "memory.db")
    if db.exists():
        import apsw  # noqa: PLC0415

        conn = apsw.Connection(str(db))
        rows = conn.execute(
            "SELECT name, sum(pgsize) FROM dbstat GROUP BY name HAVING sum(pgsize) >= ?"
            " ORDER BY 2 DESC",
            (n * 8,),
        ).fetchall()
        res["pages_per_chunk"] = {str(name): int(str(size)) // n for name, size in rows}
        conn.close()
    return res


def run(label: str, contender: str, data: str, args: argparse.Namespace, path: str) -> Any:
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
    store = tempfile.mkdtemp(prefix=f"files-{label}-", dir=args.workdir)
    cmd = [sys.executable, __file__, "--child", contender, "--data", data, "--n", str(args.n)]
    cmd += ["--timed", str(args.timed), "--store", store]
    done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--timed", type=int, default=10_000)
    parser.add_argument("--float64", action="store_true")
    parser.add_argument("--contenders", default="ratatoskr,lancedb")
    parser.add_argument("--before", default="", help="a PYTHONPATH entry for a 'before' run")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--seed", type=int, default=20240611)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.data, args.n, args.timed, args.store)))
        return
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="files-bench-")
    kind = "float64" if args.float64 else "float32"
    data = str(Path(args.workdir, f"data-{kind}-{args.n}"))
    make_vectors(Path(data), args.n, args.float64, args.seed)
    runs: list[tuple[str, str, str]] = []
    if args.before:
        runs.append(("ratatoskr (before)", "ratatoskr", args.before))
    runs += [(c, c, "") for c in args.contenders.split(",")]
    results = {label: run(label.split()[0], c, data, args, p) for label, c, p in runs}
    lance = results.get("lancedb")
    print(f"\n{args.n:,} chunks × {DIM}, {kind} embeddings, the last {args.timed:,} timed\n")
    print("| contender | on disk per chunk | × LanceDB | written per chunk (timed) | × LanceDB |")
    print("| --- | --- | --- | --- | --- |")
    for label, r in results.items():
        disk, wrote = r["disk_per_chunk"], r["written_per_chunk"]
        x_disk = f"{disk / lance['disk_per_chunk']:.2f}×" if lance else "—"
        x_wrote = f"{wrote / lance['written_per_chunk']:.2f}×" if lance else "—"
        print(f"| {label} | {disk:,.0f} B | {x_disk} | {wrote / 1024:,.1f} KB | {x_wrote} |")
    for label, r in results.items():
        if "pages_per_chunk" in r:
            print(f"\n{label}: files {r['files']}; SQLite bytes per chunk {r['pages_per_chunk']}")


if __name__ == "__main__":
    main()
