"""Where ratatoskr's time goes, measured: cProfile of the memory store on a built store.

``compare.py`` runs this on the largest store of the run, after every contender
used it, so the published table's "behind" rows come with a profile:

- ``open_memory_store`` of the existing file (the reopen), then the first search;
- 30 unfiltered searches, 30 one-tenant (1%) searches;
- 20 ``upsert_many`` batches of 100 new chunks (the store is thrown away after).

    .venv/bin/python benchmarks/profile_ratatoskr.py --store DB --data DIR --n N --out FILE
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from contenders import TOP_K, Data

ROOT = str(Path(__file__).resolve().parents[1])


def top(profile: cProfile.Profile, total_s: float, limit: int = 12) -> list[dict[str, Any]]:
    """The functions with the most cumulative time, as shares of ``total_s``."""
    stats = pstats.Stats(profile, stream=io.StringIO())
    rows = []
    for (path, line, name), (_cc, _nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        where = path.replace(ROOT + "/", "").replace(sys.prefix + "/", "")
        if "site-packages/" in where:
            where = where.split("site-packages/", 1)[1]
        rows.append({"fn": f"{where}:{line}({name})", "cum_s": ct, "self_s": tt})
    rows.sort(key=lambda r: -r["cum_s"])
    out = []
    for r in rows:
        if r["fn"].startswith("<") or "profile_ratatoskr" in r["fn"]:
            continue
        if r["fn"].startswith("~"):  # a C function: "~:0(<method 'execute' of …>)"
            r["fn"] = r["fn"].split("(", 1)[1].rstrip(")")
        r["cum_share"] = r["cum_s"] / total_s
        out.append(r)
        if len(out) >= limit:
            break
    return out


def profiled(fn: Any) -> tuple[float, cProfile.Profile]:
    pr = cProfile.Profile()
    t0 = time.perf_counter()
    pr.enable()
    fn()
    pr.disable()
    return time.perf_counter() - t0, pr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    # Imported here: compare.py imports this module for ``markdown`` alone.
    from bifrost.context import DispatchContext  # noqa: PLC0415
    from ratatoskr.memory import open_memory_store  # noqa: PLC0415

    data = Data(args.data, args.n)
    result: dict[str, Any] = {"n": args.n}
    holder: dict[str, Any] = {}

    def do_open() -> None:
        holder["store"] = open_memory_store(args.store, embedding_dim=data.vectors.shape[1])

    secs, pr = profiled(do_open)
    result["open"] = {"seconds": secs, "top": top(pr, secs)}
    store = holder["store"]
    q0, _ = data.queries("unfiltered")
    secs, pr = profiled(lambda: store.search(q0[0].tolist(), top_k=TOP_K))
    result["first_search"] = {"seconds": secs, "top": top(pr, secs)}
    for mode in ("unfiltered", "tenant"):
        qs, sels = data.queries(mode)
        qlists = [q.tolist() for q in qs[:30]]
        scopes = [None if mode == "unfiltered" else {"tenant": f"t{int(s):02d}"} for s in sels]

        def run(qlists: list[list[float]] = qlists, scopes: list[Any] = scopes) -> None:
            for q, sc in zip(qlists, scopes, strict=False):
                store.search(q, top_k=TOP_K, scope_all=sc, include={"embedding": False})

        secs, pr = profiled(run)
        result[f"search_{mode}"] = {"seconds": secs / len(qlists), "top": top(pr, secs)}
    ctx = DispatchContext(actor="profile", plane="memory", verb="upsert_many")
    batches = []
    for b in range(20):
        recs = []
        for k in range(100):
            i = (b * 100 + k) % data.n
            recs.append(
                {
                    "id": f"p{b:03d}-{k:03d}",
                    "embedding": data.vectors[i].tolist(),
                    "scope": data.scope(i),
                    "content": data.content(i),
                    "distillate": data.distillate(i),
                    "origin": "conversation",
                }
            )
        batches.append(recs)

    def upserts() -> None:
        for b, recs in enumerate(batches):
            store.upsert_many(recs, idempotency_key=f"prof-{b}", ctx=ctx)

    secs, pr = profiled(upserts)
    result["upsert_many"] = {"seconds": secs / len(batches), "top": top(pr, secs)}
    store.close()
    Path(args.out).write_text(json.dumps(result))
    return 0


def markdown(result: dict[str, Any]) -> list[str]:
    """The profile as short tables: cumulative share of the measured wall time."""
    titles = {
        "open": "open_memory_store (reopen)",
        "first_search": "first search after the open",
        "search_unfiltered": "search, unfiltered (per call)",
        "search_tenant": "search, one tenant = 1% (per call)",
        "upsert_many": "upsert_many, batch of 100 (per call)",
    }
    lines = []
    for key, title in titles.items():
        part = result.get(key)
        if not part:
            continue
        lines += [
            f"**{title}: {part['seconds'] * 1e3:,.1f} ms** at N = {result['n']:,} — cumulative"
            " share of the profiled time (cProfile):",
            "",
            "| function | share |",
            "| --- | --- |",
        ]
        lines += [f"| `{r['fn']}` | {r['cum_share'] * 100:.0f}% |" for r in part["top"]]
        lines.append("")
    return lines


if __name__ == "__main__":
    sys.exit(main())
