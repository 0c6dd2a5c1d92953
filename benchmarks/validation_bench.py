"""Validation on the write path: what bifrost costs before a store writes anything.

Per batch of 100 records, in one process, each figure the best of several rounds:

- memory ``validate_upsert`` on realistic 384-dim chunks (float embedding, ~500
  characters of content, a distillate, scope, provenance): the checks, the private
  copy of every record and the request digest (INV-002), everything a store gets;
- memory ``stored_form`` of the validated chunks (what the SQLite and PostgreSQL
  stores write: the record's JSON without its embedding, the float64 blob);
- affect ``validate_put`` on ~350-byte affect records (the affect benchmark's);
- the floors, in the same run: ``orjson.loads`` of the batch's envelope bytes (what
  the wire costs to parse the same records) and ``orjson.dumps`` of the records.

``--baseline DIR`` also runs the same measures against another bifrost source tree
(e.g. ``git archive <commit> packages/bifrost/src | tar -x -C /tmp/base`` then
``--baseline /tmp/base/packages/bifrost/src``), in fresh processes alternating with
this tree's (``--repeat`` each, the best kept), and prints the ratios side by side.

    .venv/bin/python benchmarks/validation_bench.py [--rounds 15] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from affect_bench import record as affect_record

from bifrost.affect.validation import validate_put
from bifrost.memory.validation import validate_upsert
from ratatoskr.memory.records import stored_form

BATCH = 100
DIM = 384
HERE = Path(__file__).resolve().parent


def chunk(i: int, rng: random.Random) -> dict[str, Any]:
    """A chunk as Worldtree sends it: a float32 model's embedding widened to float."""
    vec = np.asarray([rng.gauss(0.0, 1.0) for _ in range(DIM)], dtype=np.float32)
    return {
        "id": f"chunk-{i:08d}",
        "embedding": vec.astype(float).tolist(),
        "scope": {"tenant": f"tenant-{i % 100:03d}", "end_user": f"user-{i % 1000:04d}"},
        "content": f"turn {i}: " + "the user asked about the weather and then about trains " * 9,
        "distillate": f"asked about weather and trains ({i})",
        "origin": "conversation",
        "injection_source": None,
        "trust_tier": "user",
        "source_role": "user",
        "provenance": {"session": f"s-{i // 50}", "turn": i, "model": "embedder/384"},
        "created_at": 1_764_547_200.0 + i,
    }


def best_ms(fn: Callable[[], object], rounds: int, number: int) -> float:
    fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best * 1e3


def measure(rounds: int) -> dict[str, float]:
    """ms per batch of ``BATCH`` for each measure (run where ``bifrost`` is the tree
    under test)."""
    rng = random.Random(1)
    # Records as the wire parser hands them over: parsed from the envelope's bytes.
    chunk_body = orjson.dumps(
        {"verb": "upsert_many", "args": {"records": [chunk(i, rng) for i in range(BATCH)]}}
    )
    chunks: list[dict[str, Any]] = orjson.loads(chunk_body)["args"]["records"]
    affect_body = orjson.dumps(
        {"verb": "put_many", "args": {"records": [affect_record(i, 1) for i in range(BATCH)]}}
    )
    affects: list[dict[str, Any]] = orjson.loads(affect_body)["args"]["records"]

    def upsert() -> object:
        return validate_upsert(chunks, None, "key", None, embedding_dim=DIM, max_batch=1000)

    def put() -> object:
        return validate_put(affects, None, "key", None, max_batch=1000)

    out = {
        "memory: orjson.loads of the envelope (floor)": best_ms(
            lambda: orjson.loads(chunk_body), rounds, 20
        ),
        "memory: orjson.dumps of the records (floor)": best_ms(
            lambda: orjson.dumps(chunks, option=orjson.OPT_SORT_KEYS), rounds, 20
        ),
        "memory: validate_upsert (checks + copy + digest)": best_ms(upsert, rounds, 20),
    }
    validated: Any = upsert()
    out["memory: stored_form of the validated chunks"] = best_ms(
        lambda: [stored_form(c.record) for c in validated], rounds, 20
    )
    out["affect: orjson.loads of the envelope (floor)"] = best_ms(
        lambda: orjson.loads(affect_body), rounds, 50
    )
    out["affect: validate_put (checks + canonical text + digest)"] = best_ms(put, rounds, 50)
    return out


def child(rounds: int, pythonpath: str | None) -> dict[str, float]:
    """:func:`measure` in a fresh interpreter (``pythonpath`` first on its path)."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([pythonpath, str(HERE)])
    out = subprocess.run(
        [sys.executable, __file__, "--json", "--rounds", str(rounds)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    figures: dict[str, float] = json.loads(out.stdout)
    return figures


def best_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {name: min(run[name] for run in runs if name in run) for name in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="rounds per measure (best kept)")
    parser.add_argument("--baseline", help="another bifrost source tree to measure beside this")
    parser.add_argument(
        "--repeat", type=int, default=3, help="with --baseline: alternating runs of each tree"
    )
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON")
    args = parser.parse_args()
    if args.json:
        print(json.dumps(measure(args.rounds)))
        return
    base: dict[str, float] = {}
    if args.baseline:
        # Alternating fresh processes, the best of each: a shared machine's load falls on
        # both trees alike.
        mine: list[dict[str, float]] = []
        theirs: list[dict[str, float]] = []
        for _ in range(args.repeat):
            mine.append(child(args.rounds, None))
            theirs.append(child(args.rounds, args.baseline))
        figures, base = best_of(mine), best_of(theirs)
    else:
        figures = measure(args.rounds)
    print(f"batches of {BATCH} ({DIM}-dim chunks; ~350-byte affect records), best of {args.rounds}")
    head = "| measure | ms / batch | records/s |"
    rule = "|---|---|---|"
    if base:
        head += " baseline ms | baseline records/s | speed-up |"
        rule += "---|---|---|"
    print(head)
    print(rule)
    for name, ms in figures.items():
        row = f"| {name} | {ms:.3f} | {BATCH / ms * 1e3:,.0f} |"
        if base and name in base:
            b = base[name]
            row += f" {b:.3f} | {BATCH / b * 1e3:,.0f} | {b / ms:.2f}× |"
        print(row)


if __name__ == "__main__":
    main()
