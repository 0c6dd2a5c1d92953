"""Child process for the two-process test: writes its own chunks and searches all.

Usage: python concurrent_worker.py DB_PATH NAME ROUNDS [TOMBSTONE_RETENTION]. Exits
non-zero (with the exception on stderr) on any failure, e.g. "database is locked".
"""

from __future__ import annotations

import random
import sys

from bifrost.context import DispatchContext
from ratatoskr.memory import open_memory_store

DIM = 8


def main() -> None:
    path, name, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    retention = int(sys.argv[4]) if len(sys.argv) > 4 else 10_000
    store = open_memory_store(path, embedding_dim=DIM, tombstone_retention=retention)
    ctx = DispatchContext(actor=name)
    rng = random.Random(name)
    for n in range(rounds):
        records = [
            {
                "id": f"{name}-{n}-{i}",
                "embedding": [rng.uniform(-1, 1) for _ in range(DIM)],
                "scope": {"tenant": name},
            }
            for i in range(10)
        ]
        store.upsert_many(records, idempotency_key=f"{name}-{n}", ctx=ctx)
        if n % 5 == 4:
            store.delete_many([f"{name}-{n}-0"])
        own = store.search(records[1]["embedding"], top_k=3, scope_all={"tenant": name})  # type: ignore[arg-type]
        assert own[0]["chunk_id"] == f"{name}-{n}-1", "own write not visible"
        store.search([rng.uniform(-1, 1) for _ in range(DIM)], top_k=20)
    store.close()
    print("ok")


if __name__ == "__main__":
    main()
