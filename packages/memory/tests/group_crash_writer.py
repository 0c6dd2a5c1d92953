"""Child process for the group-commit crash test: 8 threads upsert batches into one
store (so they share commits) until killed.

Usage: python group_crash_writer.py DB_PATH ROUND. Prints ``ack <n>`` (flushed) once
batch ``n`` (``BATCH`` chunks ``b<n>-<i>``) was acknowledged by the store.
"""

from __future__ import annotations

import sys

from crash_writer import DIM, batch  # type: ignore[import-not-found]

from bifrost.context import DispatchContext
from ratatoskr.memory import open_memory_store
from ratatoskr.sqlite.grouptest import ack_forever

THREADS = 8


def main() -> None:
    path, round_ = sys.argv[1], int(sys.argv[2])
    store = open_memory_store(path, embedding_dim=DIM)
    ctx = DispatchContext(actor="group-crash-writer")
    ack_forever(
        THREADS,
        lambda t: (round_ * THREADS + t) * 100_000,
        lambda n: store.upsert_many(batch(n), idempotency_key=f"batch-{n}", ctx=ctx),
    )


if __name__ == "__main__":
    main()
