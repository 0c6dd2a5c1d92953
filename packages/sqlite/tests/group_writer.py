"""Child process for the group-commit crash test: 8 threads write batches through
``Database.write_batch`` (so they share commits) until killed.

Usage: python group_writer.py DB_PATH ATTEMPT. Prints ``ack <n>`` (flushed) once
batch ``n`` (5 rows, all of batch ``n``) was acknowledged.
"""

from __future__ import annotations

import sys
from typing import Any

import apsw

from ratatoskr.sqlite import ConnectionOptions, Database, Migration, Written
from ratatoskr.sqlite.grouptest import ack_forever

MIGRATIONS = [
    Migration(
        1,
        "items",
        "CREATE TABLE items (id TEXT PRIMARY KEY, batch INTEGER NOT NULL, body TEXT NOT NULL)",
    )
]
THREADS = 8
ROWS = 5


def main() -> None:
    path, attempt = sys.argv[1], int(sys.argv[2])
    db = Database(path, plane="test", migrations=MIGRATIONS, options=ConnectionOptions())

    def write(n: int) -> object:
        def batch(conn: apsw.Connection) -> Written[Any]:
            conn.executemany(
                "INSERT INTO items (id, batch, body) VALUES (?, ?, ?)",
                [(f"{n}-{i}", n, "x" * 300) for i in range(ROWS)],
            )
            return Written(n)

        return db.write_batch(batch)

    ack_forever(THREADS, lambda t: (attempt * THREADS + t) * 1_000_000, write)


if __name__ == "__main__":
    main()
