"""Erasure's costs on the SQLite planes (issue 23), side by side in one run.

1. ``forget`` of one end user (``--victim`` chunks and ``--victim-keys`` affect keys)
   in a memory store of ``--chunks`` chunks (``--dim``): its wall time, and the
   search latency of other tenants measured idle and while the forget runs. The
   forget runs as ``ratatoskr forget`` does beside a provider: in another process,
   on the same files, while this one (the provider) searches from one thread;
   ``--same-process`` runs it in a thread of the searching process instead (the
   searcher then also waits for the interpreter lock the forget holds).
2. ``secure_delete`` ON vs OFF: ``upsert_many`` and ``delete_many`` throughput on
   fresh stores, batch by batch in turn (a shared disk's load falls on all alike),
   wall and thread CPU; a third store is ON without the page-cache room an erasure
   makes (the code before it).

    .venv/bin/python benchmarks/forget_bench.py                 # 100k chunks, 384 dims
    .venv/bin/python benchmarks/forget_bench.py --chunks 20000  # quicker
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from bifrost.context import DispatchContext
from ratatoskr.affect import open_affect_store
from ratatoskr.memory import open_memory_store
from ratatoskr.sqlite import ConnectionOptions, erasure

CTX = DispatchContext(actor="bench", scope={})
VICTIM = {"tenant": "t-victim", "end_user": "victim"}
TENANTS = 20


def chunks(start: int, n: int, dim: int, victim_every: int, rng: np.random.Generator) -> list[Any]:
    vecs = rng.standard_normal((n, dim)).tolist()
    out = []
    for j, v in enumerate(vecs):
        i = start + j
        scope = (
            VICTIM
            if victim_every and i % victim_every == 0
            else {"tenant": f"t{i % TENANTS}", "end_user": f"u{i % 97}"}
        )
        out.append({"id": f"c{i:07d}", "embedding": v, "scope": scope, "content": f"note {i}"})
    return out


def sched() -> tuple[float, float]:
    """This thread's seconds on a CPU and waiting in the run queue for one (Linux's
    schedstat; zeros elsewhere): wall minus both is time blocked (I/O, locks)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            on_cpu, waiting = f.read().split()[:2]
    except OSError:
        return 0.0, 0.0
    return int(on_cpu) / 1e9, int(waiting) / 1e9


def p(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q)) if values else float("nan")


def search_loop(
    store: Any, dim: int, stop: threading.Event, out: list[float], cpu: list[float]
) -> None:
    rng = np.random.default_rng(7)
    start = time.thread_time()
    while not stop.is_set():
        q = rng.standard_normal(dim).tolist()
        tenant = f"t{int(rng.integers(TENANTS))}"
        t0 = time.perf_counter()
        store.search(q, top_k=10, scope_all={"tenant": tenant})
        out.append((time.perf_counter() - t0) * 1000)
    cpu.append(time.thread_time() - start)


def forget_run(args: argparse.Namespace, tmp: Path) -> None:
    rng = np.random.default_rng(1)
    mem = open_memory_store(str(tmp / "memory.db"), embedding_dim=args.dim)
    every = args.chunks // args.victim
    t0 = time.perf_counter()
    for start in range(0, args.chunks, 1000):
        mem.upsert_many(
            chunks(start, min(1000, args.chunks - start), args.dim, every, rng),
            idempotency_key=f"fill-{start}",
            ctx=CTX,
        )
    print(f"filled {args.chunks} chunks x {args.dim} in {time.perf_counter() - t0:.1f} s")
    aff = open_affect_store(str(tmp / "affect.db"))
    keys = [
        {"key": f"k{i:06d}", "scope": VICTIM if i % 10 == 0 else {"tenant": "t1"}, "mood": i}
        for i in range(args.victim_keys * 10)
    ]
    for start in range(0, len(keys), 1000):
        aff.put_many(keys[start : start + 1000], idempotency_key=f"a{start}", ctx=CTX)

    def measure(seconds: float | None, work: Any = None) -> tuple[list[float], float, float]:
        """Search latencies, wall seconds, and CPU seconds of every thread but the
        searcher (the forget's own and the erasure's background thread)."""
        stop, lat, search_cpu = threading.Event(), list[float](), list[float]()
        th = threading.Thread(target=search_loop, args=(mem, args.dim, stop, lat, search_cpu))
        c = time.process_time()
        th.start()
        t = time.perf_counter()
        if work is None:
            time.sleep(seconds or 0)
        else:
            work()
        took = time.perf_counter() - t
        stop.set()
        th.join()
        return lat, took, time.process_time() - c - search_cpu[0]

    measure(1.0)  # warm
    idle, _, _ = measure(args.idle_s)
    counts: dict[str, int] = {}

    cpu: dict[str, float] = {}

    if not args.same_process:
        mem.close()  # the provider's store: reopened below, as a provider's would be
        mem = open_memory_store(str(tmp / "memory.db"), embedding_dim=args.dim)
        aff.close()
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=forget_child, args=(str(tmp), args.dim, child))
        proc.start()
        assert parent.recv() == "ready"  # the child's stores are open

        def forget_elsewhere() -> None:
            parent.send("go")
            got = parent.recv()
            counts.update(got["counts"])
            cpu.update(got["cpu"])
            proc.join()

        measure(1.0)  # warm again on the reopened store
        idle, _, _ = measure(args.idle_s)
        during, took, _ = measure(None, forget_elsewhere)
        print(
            f"forget (another process, as the CLI): {counts['memory']} chunks +"
            f" {counts['affect']} affect keys in {cpu['wall']:.2f} s wall in the forgetting"
            f" process ({took:.2f} s seen by the provider, target <= 5 s) in a store of"
            f" {args.chunks}; its CPU s: memory {cpu['memory']:.2f}, affect {cpu['affect']:.2f}"
        )
        report(idle, during)
        mem.close()
        return

    def forget() -> None:
        s0 = sched()
        t = time.thread_time()
        counts["memory"] = mem.forget({"end_user": "victim"})
        cpu["memory"] = time.thread_time() - t
        counts["affect"] = aff.forget({"end_user": "victim"})
        cpu["affect"] = time.thread_time() - t - cpu["memory"]
        s1 = sched()
        cpu["on_cpu"], cpu["queued"] = s1[0] - s0[0], s1[1] - s0[1]

    during, took, others_cpu = measure(None, forget)
    print(
        f"forget: {counts['memory']} chunks + {counts['affect']} affect keys in {took:.2f} s"
        f" (target <= 5 s) in a store of {args.chunks}; CPU s of the forgetting thread:"
        f" memory {cpu['memory']:.2f}, affect {cpu['affect']:.2f}; of every thread but the"
        f" searcher: {others_cpu:.2f}"
    )
    print(
        f"forgetting thread: {cpu['on_cpu']:.2f} s on a CPU, {cpu['queued']:.2f} s waiting for"
        f" one (busy cores), {took - cpu['on_cpu'] - cpu['queued']:.2f} s blocked"
        " (I/O, locks, the GIL)"
    )
    report(idle, during)
    mem.close()
    aff.close()


def report(idle: list[float], during: list[float]) -> None:
    print("| other tenants' search | n | p50 ms | p99 ms |")
    print("|---|---|---|---|")
    for name, lat in (("idle", idle), ("during forget", during)):
        print(f"| {name} | {len(lat)} | {p(lat, 50):.2f} | {p(lat, 99):.2f} |")
    print(f"p99 during / idle: {p(during, 99) / p(idle, 99):.2f} (target <= 2)")
    print("load average after:", ", ".join(f"{x:.1f}" for x in os.getloadavg()))


def forget_child(tmp: str, dim: int, conn: Any) -> None:
    """What ``ratatoskr forget --plane all`` does: open both planes' stores on the
    files, forget the end user in each; report counts, wall and CPU seconds."""
    mem = open_memory_store(str(Path(tmp) / "memory.db"), embedding_dim=dim)
    aff = open_affect_store(str(Path(tmp) / "affect.db"))
    conn.send("ready")
    conn.recv()
    t0, c0 = time.perf_counter(), time.process_time()
    counts = {"memory": mem.forget({"end_user": "victim"})}
    c1 = time.process_time()
    counts["affect"] = aff.forget({"end_user": "victim"})
    c2 = time.process_time()
    wall = time.perf_counter() - t0
    mem.close()
    aff.close()
    conn.send({"counts": counts, "cpu": {"memory": c1 - c0, "affect": c2 - c1, "wall": wall}})


def secure_delete_run(args: argparse.Namespace, tmp: Path) -> None:
    """OFF, ON, and ON without the page-cache room an erasure makes
    (:func:`ratatoskr.sqlite.erasure.make_room`: SQLite's default 2 MB cache, as
    before it), batch by batch in turn; thread CPU beside wall."""
    room = erasure.make_room
    configs = {"OFF": (False, True), "ON": (True, True), "ON, no room": (True, False)}
    stores = {
        name: open_memory_store(
            str(tmp / f"sd-{i}.db"),
            embedding_dim=args.dim,
            options=ConnectionOptions(secure_delete=on),
        )
        for i, (name, (on, _room)) in enumerate(configs.items())
    }
    rng = np.random.default_rng(2)
    up: dict[str, list[float]] = {name: [] for name in configs}
    rm: dict[str, list[float]] = {name: [] for name in configs}
    rm_cpu: dict[str, float] = dict.fromkeys(configs, 0.0)
    batch = 500
    rounds = args.sd_chunks // batch
    names = list(configs)
    for r in range(rounds):
        rows = chunks(r * batch, batch, args.dim, 0, rng)
        for name in names if r % 2 == 0 else names[::-1]:
            t = time.perf_counter()
            stores[name].upsert_many(rows, idempotency_key=f"u{r}", ctx=CTX)
            up[name].append(time.perf_counter() - t)
    for r in range(rounds):
        ids = [f"c{i:07d}" for i in range(r * batch, (r + 1) * batch)]
        for name in names if r % 2 == 0 else names[::-1]:
            erasure.make_room = room if configs[name][1] else (lambda conn, pages: None)
            t, c = time.perf_counter(), time.thread_time()
            stores[name].delete_many(ids)
            rm[name].append(time.perf_counter() - t)
            rm_cpu[name] += time.thread_time() - c
    erasure.make_room = room
    print(f"secure_delete, {args.sd_chunks} chunks x {args.dim}, batches of {batch}:")
    print("| verb | OFF rows/s | ON rows/s | ON cost | ON, no room rows/s | its cost |")
    print("|---|---|---|---|---|---|")
    for verb, res in (("upsert_many", up), ("delete_many", rm)):
        rate = {name: batch / statistics.median(res[name]) for name in configs}
        off = rate["OFF"]
        print(
            f"| {verb} | {off:,.0f} | {rate['ON']:,.0f} | {100 * (rate['ON'] - off) / off:+.1f}%"
            f" | {rate['ON, no room']:,.0f} | {100 * (rate['ON, no room'] - off) / off:+.1f}% |"
        )
    cpu = ", ".join(f"{name} {rm_cpu[name]:.2f}" for name in configs)
    print(f"delete_many CPU s (deleting thread): {cpu}")
    off_cpu = rm_cpu["OFF"]
    print(
        f"delete_many CPU cost of ON: {100 * (rm_cpu['ON'] - off_cpu) / off_cpu:+.1f}%,"
        f" without the room {100 * (rm_cpu['ON, no room'] - off_cpu) / off_cpu:+.1f}%"
    )
    for s in stores.values():
        s.close()


def wal_pages_run(args: argparse.Namespace, tmp: Path) -> None:
    """WAL pages one deleted chunk writes, secure_delete ON vs OFF: 500 chunks deleted
    from a fresh 5,000-chunk store, contiguous ids and every 10th id (no checkpoint in
    between: the WAL holds exactly the delete's pages)."""
    print("WAL pages written per deleted chunk (delete_many of 500):")
    print("| ids | OFF | ON |")
    print("|---|---|---|")
    for spread in (1, 10):
        pages: dict[bool, float] = {}
        for on in (False, True):
            db = tmp / f"wal-{spread}-{on}.db"
            opts = ConnectionOptions(secure_delete=on, wal_autocheckpoint=0)
            store = open_memory_store(str(db), embedding_dim=args.dim, options=opts)
            rng = np.random.default_rng(3)
            for start in range(0, 5000, 1000):
                rows = chunks(start, 1000, args.dim, 0, rng)
                store.upsert_many(rows, idempotency_key=f"w{start}", ctx=CTX)
            store.database.erasure.flush()  # an empty WAL
            # Read before the background flush truncates the WAL (~1 s after the delete).
            store.delete_many([f"c{i:07d}" for i in range(0, 500 * spread, spread)])
            with store.database.read() as conn:
                frame = 24 + int(conn.execute("PRAGMA page_size").fetchall()[0][0])  # type: ignore[arg-type]
            pages[on] = (Path(f"{db}-wal").stat().st_size - 32) / frame / 500
            store.close()
        name = "contiguous" if spread == 1 else f"every {spread}th"
        print(f"| {name} | {pages[False]:.2f} | {pages[True]:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--victim", type=int, default=10_000)
    ap.add_argument("--victim-keys", type=int, default=1_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--idle-s", type=float, default=5.0)
    ap.add_argument("--sd-chunks", type=int, default=20_000)
    ap.add_argument("--same-process", action="store_true")
    ap.add_argument("--skip-forget", action="store_true")
    ap.add_argument("--skip-secure-delete", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="forget-bench-") as d:
        if not args.skip_forget:
            forget_run(args, Path(d))
        if not args.skip_secure_delete:
            secure_delete_run(args, Path(d))
            wal_pages_run(args, Path(d))


if __name__ == "__main__":
    main()
