"""Child process for the crash test: writes batches forever, acknowledging each.

Usage: python crash_writer.py DB_PATH START_BATCH. Batch ``n`` rewrites the
shared keys ``s0…`` (their next revision, carrying ``batch: n``) and creates
fresh keys ``b<n>-…``. ``ack <n>`` is printed and flushed only after
``put_many`` returned, so the parent knows which batches must survive SIGKILL.
"""

from __future__ import annotations

import sys
from typing import Any

from bifrost.context import DispatchContext
from ratatoskr.affect import open_affect_store

SHARED = 10
FRESH = 30
ACTOR = "crash-writer"


def batch(n: int) -> list[dict[str, Any]]:
    shared = [
        {"key": f"s{i}", "scope": {"tenant": f"t{n % 3}"}, "batch": n, "pad": "x" * 300}
        for i in range(SHARED)
    ]
    fresh = [
        {"key": f"b{n}-{i}", "scope": {"tenant": "t1"}, "batch": n, "pad": "y" * 300}
        for i in range(FRESH)
    ]
    return shared + fresh


def main() -> None:
    path, start = sys.argv[1], int(sys.argv[2])
    store = open_affect_store(path)
    ctx = DispatchContext(actor=ACTOR, plane="affect")
    n = start
    while True:
        store.put_many(batch(n), idempotency_key=f"batch-{n}", ctx=ctx)
        sys.stdout.write(f"ack {n}\n")
        sys.stdout.flush()
        n += 1


if __name__ == "__main__":
    main()
