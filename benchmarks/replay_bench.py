"""The replay check's cost: the shared SQLite replay file against the in-process cache.

Run: ``.venv/bin/python benchmarks/replay_bench.py [--n 20000] [--procs 2]``

Per call a verifier runs ``seen`` (before the body is read) and ``check_and_add``
(after it is checked). Timed one call at a time in one process, then with
``--procs`` processes inserting into the same file at once (workers of one
deployment), p50 and p99 in microseconds.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import time
import uuid

from bifrost.auth import InMemoryTokenCache, TokenCache
from ratatoskr.sqlite import SqliteTokenCache


def _time(cache: TokenCache, n: int) -> tuple[list[float], list[float]]:
    now = time.time()
    seen: list[float] = []
    added: list[float] = []
    for _ in range(n):
        jti = str(uuid.uuid4())
        t0 = time.perf_counter()
        cache.seen(jti, now)
        t1 = time.perf_counter()
        assert cache.check_and_add(jti, now + 330, now)
        t2 = time.perf_counter()
        seen.append(t1 - t0)
        added.append(t2 - t1)
    return seen, added


def _pct(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6


def _worker(path: str, n: int, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    cache = SqliteTokenCache(path)
    _, added = _time(cache, n)
    cache.close()
    out.put(added)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--procs", type=int, default=2)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="replay-bench-")
    path = os.path.join(tmp, "memory.db.replay")
    rows = []
    for name, cache in (
        ("in-process (one process only)", InMemoryTokenCache(10 * args.n)),
        ("SQLite replay file", SqliteTokenCache(path)),
    ):
        seen, added = _time(cache, args.n)
        rows.append((name, _pct(seen, 0.5), _pct(added, 0.5), _pct(added, 0.99)))
    queue: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    procs = [
        multiprocessing.Process(target=_worker, args=(path, args.n // args.procs, queue))
        for _ in range(args.procs)
    ]
    for p in procs:
        p.start()
    shared: list[float] = []
    for _ in procs:
        shared += queue.get()
    for p in procs:
        p.join()
    rows.append(
        (
            f"SQLite replay file, {args.procs} processes at once",
            0.0,
            _pct(shared, 0.5),
            _pct(shared, 0.99),
        )
    )
    print(f"replay check, {args.n} tokens, load {os.getloadavg()[0]:.1f}")
    print("| cache | seen p50 µs | check_and_add p50 µs | check_and_add p99 µs |")
    print("|---|---|---|---|")
    for name, s50, a50, a99 in rows:
        print(f"| {name} | {s50:.1f} | {a50:.1f} | {a99:.1f} |")
    print(f"(mean check_and_add, shared: {statistics.mean(shared) * 1e6:.1f} µs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
