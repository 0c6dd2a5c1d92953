"""Before/after of the HTTP path in one run: two `ratatoskr serve` (this checkout and
another tree) and the bare floor, on the same files, their calls interleaved in blocks.

    git worktree add /tmp/old <commit>
    .venv/bin/python benchmarks/wire_ab.py --old /tmp/old          # ~4 min

On a shared machine absolute figures drift with the background load; calls interleaved
block by block (old, new, floor, and the store API in this process for reads and
upserts) see the same load, so the ratios hold. What it measures, with wire_bench.py's
calls (10k chunks of 384 dims, 100 tenants): p50 and server CPU per call of memory
`health`, `get`, affect `get`, VMP `meta/get`, a one-tenant `search` and a 100-chunk
`upsert_many`, the store API's p50 for the same reads and its rate for the same
batches, and the load table (8 client processes, one-tenant searches, interleaved
slices). The old tree's code is imported through PYTHONPATH (its packages/*/src); it
must open the same files (same schema), so pick a commit of the same schema.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import wire_bench as wb

CALLS = ("health", "get", "affect_get", "vmp_get", "search", "upsert_100")
BLOCKS = 6
WARM_UPSERTS = 10


def _bench(tmp: Path) -> wb.Bench:
    args = argparse.Namespace(
        vmp_dim=wb.DIM, seed=20261202, quick=True, n=10_000, n_big=0, clients=8, keep=False
    )
    bench = wb.Bench(args)
    shutil.rmtree(bench.tmp, ignore_errors=True)
    bench.tmp = tmp
    bench.db = {p: tmp / f"{p}.db" for p in ("memory", "affect", "vmp")}
    return bench


def _start_old(bench: wb.Bench, tree: Path) -> wb.Server:
    paths = ":".join(str(p) for p in sorted(tree.glob("packages/*/src")))
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = paths
    try:
        return bench.ratatoskr(1)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = saved


def _store_call(mem: Any, name: str, call: wb.Prepared) -> float:
    """One store API call answering ``call``; its seconds."""
    from bifrost.context import DispatchContext  # noqa: PLC0415

    a = call.args
    if name == "upsert_100":
        ctx = DispatchContext(actor=wb.ACTOR, scope=dict(call.grant), verb="upsert_many")
        records = json.loads(json.dumps(a["records"]))  # a fresh copy, as a parse gives
        t0 = time.perf_counter()
        mem.upsert_many(records, idempotency_key=f"store-{uuid.uuid4()}", ctx=ctx)
        return time.perf_counter() - t0
    t0 = time.perf_counter()
    if name == "search":
        mem.search(a["vector"], top_k=a["top_k"], scope_all=a["scope_all"], include=a["include"])
    else:
        mem.get(a["chunk_id"])
    return time.perf_counter() - t0


def run(old_tree: Path, reps: int, upserts: int, rounds: int, warm: int) -> dict[str, Any]:
    from ratatoskr.memory import open_memory_store  # noqa: PLC0415

    tmp = Path(tempfile.mkdtemp(prefix="wire-ab-"))
    bench = _bench(tmp)
    out: dict[str, Any] = {"load_average_start": wb.loadavg()}
    try:
        seeder = bench.ratatoskr(1)
        bench.seed_memory(seeder, bench.n)
        bench.seed_vmp(seeder)
        bench.seed_affect(seeder)
        seeder.stop()  # both contenders then open the seeded files alike
        new = bench.ratatoskr(1)
        old = _start_old(bench, old_tree)
        specs = {s.name: s for s in bench.specs()}
        sizes = bench.calibrate(new, [specs[x] for x in CALLS])
        floor = bench.floor({k: v[1] for k, v in sizes.items()})
        servers = {"old": old, "new": new, "floor": floor}
        trees = {k: s.tree() for k, s in servers.items()}
        mem = open_memory_store(str(bench.db["memory"]), embedding_dim=wb.DIM)
        try:
            with httpx.Client(trust_env=False, timeout=120) as client:
                for name in CALLS:
                    wb.log(f"interleaved: {name}")
                    out[name] = _interleave(
                        client, servers, trees, specs[name], mem, (reps, upserts, warm)
                    )
        finally:
            mem.close()
        floor.stop()
        floor = bench.floor({"search": sizes["search"][1]})
        targets = [
            wb.LoadResult(bench.n, "old", "1", old, old.url + wb.MEMORY_CALL, bench.key_hex),
            wb.LoadResult(bench.n, "new", "1", new, new.url + wb.MEMORY_CALL, bench.key_hex),
            wb.LoadResult(bench.n, "floor", "1", floor, floor.url + "/floor/search"),
        ]
        wb.log("load: 8 clients, one-tenant searches, interleaved slices")
        wb.run_load(targets, 8, rounds, 2.5, 11)
        out["load"] = {
            t.contender: {
                "rps": t.rps,
                "p50_ms": wb.pct(t.lat, 50) * 1e3,
                "cpu_ms": t.per_req(t.server_cpu_s) * 1e3,
                "errors": t.errors,
            }
            for t in targets
        }
    finally:
        for server in list(wb.STARTED):
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    out["load_average_end"] = wb.loadavg()
    return out


def _interleave(
    client: httpx.Client,
    servers: dict[str, wb.Server],
    trees: dict[str, wb.ProcTree],
    spec: wb.VerbSpec,
    mem: Any,
    sizes: tuple[int, int, int],
) -> dict[str, Any]:
    """``sizes``: timed calls per small verb, timed upserts, untimed calls per small verb."""
    reps, upserts, warm_calls = sizes
    count = upserts if spec.name == "upsert_100" else reps
    # Untimed first: the servers' caches (SQLite pages, the index, the token cache) warm.
    warm = WARM_UPSERTS if spec.name == "upsert_100" else warm_calls
    calls = {k: [spec.make(i) for i in range(count + warm)] for k in ("old", "new")}
    calls["floor"] = calls["new"]  # the floor checks no token
    lat: dict[str, list[float]] = {k: [] for k in servers}
    cpu = dict.fromkeys(servers, 0.0)
    store: list[float] = []

    def url(k: str) -> str:
        return servers[k].url + (f"/floor/{spec.name}" if k == "floor" else spec.path)

    for k in servers:
        wb.run_calls(client, url(k), calls[k][:warm], wb.Sample())
    step = -(-count // BLOCKS)
    for lo in range(warm, count + warm, step):
        for k in servers:
            sample = wb.Sample()
            c0 = trees[k].cpu_s()
            wb.run_calls(client, url(k), calls[k][lo : lo + step], sample)
            cpu[k] += trees[k].cpu_s() - c0
            lat[k] += sample.lat
            if sample.errors:
                raise RuntimeError(f"{k} {spec.name}: {sample.errors} errors")
        if spec.name in ("get", "search", "upsert_100"):
            store += [_store_call(mem, spec.name, c) for c in calls["new"][lo : lo + step]]
    row: dict[str, Any] = {
        k: {
            "p50_ms": statistics.median(v) * 1e3,
            "cpu_ms": cpu[k] / len(v) * 1e3,
            "total_s": sum(v),
            "calls": len(v),
        }
        for k, v in lat.items()
    }
    if store:
        row["store"] = {"p50_ms": statistics.median(store) * 1e3, "total_s": sum(store)}
    return row


def report(out: dict[str, Any], cmd: str) -> str:
    lines = [
        f"Command: `{cmd}`; load average {out['load_average_start']} at the start,"
        f" {out['load_average_end']} at the end.",
        "",
        "| call | old p50 ms | new p50 ms | floor p50 ms | new ÷ floor | store p50 ms |"
        " old CPU/call ms | new CPU/call ms | floor CPU/call ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in CALLS:
        r = out[name]
        o, n, f = r["old"], r["new"], r["floor"]
        store = f"{r['store']['p50_ms']:.3f}" if "store" in r else ""
        lines.append(
            f"| {name} | {o['p50_ms']:.2f} | {n['p50_ms']:.2f} | {f['p50_ms']:.2f} |"
            f" {n['p50_ms'] / f['p50_ms']:.2f}× | {store} | {o['cpu_ms']:.2f} |"
            f" {n['cpu_ms']:.2f} | {f['cpu_ms']:.2f} |"
        )
    up = out["upsert_100"]
    # Rates from the p50 batch: the three writers interleave on one file, so each write
    # may first catch its index up with the others' (a cost a lone writer never pays),
    # and that lands in the tails, not in the median.
    rate = {k: 100e3 / up[k]["p50_ms"] for k in ("old", "new", "store")}
    lines += [
        "",
        f"Upsert, one client, batches of 100 × {wb.DIM} dims, from the p50 batch: old"
        f" {rate['old']:,.0f} chunks/s over HTTP ({rate['old'] / rate['store']:.2f}× the"
        f" store), new {rate['new']:,.0f} ({rate['new'] / rate['store']:.2f}×); the store"
        f" API {rate['store']:,.0f} chunks/s, interleaved with them.",
        "",
        "| load (8 clients, one-tenant search) | req/s | p50 ms | server CPU/req ms | errors |",
        "| --- | --- | --- | --- | --- |",
    ]
    for k, v in out["load"].items():
        lines.append(
            f"| {k} | {v['rps']:,.0f} | {v['p50_ms']:.2f} | {v['cpu_ms']:.3f} | {v['errors']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--old", type=Path, required=True, help="a tree with packages/*/src")
    p.add_argument("--reps", type=int, default=300, help="calls per small verb (default 300)")
    p.add_argument("--upserts", type=int, default=30, help="100-chunk batches (default 30)")
    p.add_argument("--rounds", type=int, default=4, help="load rounds (default 4)")
    p.add_argument(
        "--warm", type=int, default=400, help="untimed calls per small verb first (default 400)"
    )
    p.add_argument("--out", type=Path, default=None, help="write the JSON figures here")
    args = p.parse_args(argv)
    if not list(args.old.glob("packages/*/src")):
        p.error(f"{args.old} has no packages/*/src")
    out = run(args.old, args.reps, args.upserts, args.rounds, args.warm)
    if args.out is not None:
        args.out.write_text(json.dumps(out, indent=1))
    cmd = f".venv/bin/python benchmarks/wire_ab.py --old {args.old}"
    print(report(out, cmd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
