"""Child process for the upgrade crash test: opens (so upgrades) a schema v1 file.

Usage: python migrate_worker.py DB_PATH. Prints ``ack 0`` once imported (so the
parent's kill lands in the upgrade, not in interpreter start-up) and ``ack 1`` when
the store is open, then waits to be killed.
"""

from __future__ import annotations

import sys
import time

from ratatoskr.affect import open_affect_store


def main() -> None:
    sys.stdout.write("ack 0\n")
    sys.stdout.flush()
    _store = open_affect_store(sys.argv[1])  # kept open until killed
    sys.stdout.write("ack 1\n")
    sys.stdout.flush()
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
