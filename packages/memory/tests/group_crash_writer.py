"""Child process for the group-commit crash test: 8 threads upsert batches into one
store (so they share commits) until killed.

Usage: python group_crash_writer.py DB_PATH ROUND. Prints ``ack <n>`` (flushed) once
batch ``n`` (``BATCH`` chunks ``b<n>-<i>``) was acknowledged by the store.
"""

from __future__ import annotations

import sys
import threading

from crash_writer import DIM, batch  # type: ignore[import-not-found]

from bifrost.context import DispatchContext
from ratatoskr.memory import open_memory_store

THREADS = 8


def main() -> None:
    path, round_ = sys.argv[1], int(sys.argv[2])
    store = open_memory_store(path, embedding_dim=DIM)
    ctx = DispatchContext(actor="group-crash-writer")
    out = threading.Lock()

    def writer(t: int) -> None:
        n = (round_ * THREADS + t) * 100_000
        while True:
            store.upsert_many(batch(n), idempotency_key=f"batch-{n}", ctx=ctx)
            with out:
                sys.stdout.write(f"ack {n}\n")
                sys.stdout.flush()
            n += 1

    threads = [threading.Thread(target=writer, args=(t,), daemon=True) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
