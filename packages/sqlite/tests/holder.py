"""A process that holds a test database open, for the in-use, backup and stats tests.

``python holder.py MODE PATH``: opens PATH with the house pragmas, reads once, prints
``ready``, then ``idle`` (or ``readonly``: a read-only connection) waits until stdin
closes; ``write`` commits one row per transaction forever, printing each row's id
after its commit returned (an acknowledged write).
"""

from __future__ import annotations

import sys

from ratatoskr.sqlite import ConnectionOptions, connect


def main() -> None:
    mode, path = sys.argv[1], sys.argv[2]
    conn = connect(path, ConnectionOptions(readonly=mode == "readonly"))
    conn.execute("SELECT count(*) FROM items").fetchall()
    print("ready", flush=True)
    if mode != "write":
        sys.stdin.read()
        return
    i = 0
    while True:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO items (id, body) VALUES (?, ?)", (f"w{i}", "x" * 200))
        conn.execute("COMMIT")
        print(f"w{i}", flush=True)
        i += 1


if __name__ == "__main__":
    main()
