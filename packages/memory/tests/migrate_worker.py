"""Child process for the upgrade crash test: opens (so upgrades) a schema v1 file.

Usage: python migrate_worker.py DB_PATH DIM. Prints ``ack 0`` once imported (so the
parent's kill lands in the upgrade, not in interpreter start-up) and ``ack 1`` when
the store is open, then waits to be killed.
"""

from __future__ import annotations

import sys
import time

from ratatoskr.memory import open_memory_store


def main() -> None:
    path, dim = sys.argv[1], int(sys.argv[2])
    sys.stdout.write("ack 0\n")
    sys.stdout.flush()
    _store = open_memory_store(path, embedding_dim=dim)  # kept open until killed
    sys.stdout.write("ack 1\n")
    sys.stdout.flush()
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
