"""Child process for the crash tests: writes batches forever, acknowledging each.

Usage: python crash_writer.py DB_PATH START_BATCH. Prints ``ack <n>`` after batch
``n`` was acknowledged by the store (flushed), so the parent knows which writes
must survive a SIGKILL.
"""

from __future__ import annotations

import sys

from bifrost.context import DispatchContext
from ratatoskr.memory import open_memory_store

BATCH = 20
DIM = 8


def batch(n: int) -> list[dict[str, object]]:
    return [
        {
            "id": f"b{n}-{i}",
            "embedding": [float((n * 31 + i * 7 + d) % 11) + 1.0 for d in range(DIM)],
            "scope": {"tenant": f"t{n % 3}"},
            "content": "x" * 200,
            "batch": n,
        }
        for i in range(BATCH)
    ]


def main() -> None:
    path, start = sys.argv[1], int(sys.argv[2])
    store = open_memory_store(path, embedding_dim=DIM)
    ctx = DispatchContext(actor="crash-writer")
    n = start
    while True:
        store.upsert_many(batch(n), idempotency_key=f"batch-{n}", ctx=ctx)
        # Rewrite an earlier batch too, so updates are interrupted as well as inserts.
        if n > start:
            store.delete_many([f"b{n - 1}-0"])
        sys.stdout.write(f"ack {n}\n")
        sys.stdout.flush()
        n += 1


if __name__ == "__main__":
    main()
