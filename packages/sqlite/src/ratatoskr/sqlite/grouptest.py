"""Testing group commit: calls queued behind a held write, so they form one group.

Every plane's group-commit tests need the same set-up: several writes from
threads of their own, queued in a known order while the write lock is held, so
that the first of them leads one group carrying them all. Their crash tests need a
child process whose threads write batches until it is killed, saying which were
acknowledged (:func:`ack_forever`).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ratatoskr.sqlite.database import Database


def run_grouped(
    db: Database, calls: Sequence[Callable[[], Any]], *, timeout_s: float = 30
) -> list[Any]:
    """Run each of ``calls`` (each submitting one batch to ``db``, e.g. a store's write)
    on a thread of its own, queued in this order behind a write transaction held
    meanwhile; return each call's value or the exception it raised.

    Raises AssertionError when group commit is off or a call did not queue in time.
    """
    group = db.group
    if group is None:
        raise AssertionError("group commit is off for this database")
    out: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            out[i] = calls[i]()
        except BaseException as exc:  # handed to the test
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    with db.write():  # the calls queue behind this (empty) transaction
        base = group.queued
        for i, thread in enumerate(threads):
            thread.start()
            deadline = time.monotonic() + timeout_s
            while group.queued < base + i + 1:
                if time.monotonic() > deadline or (not thread.is_alive() and out[i] is not None):
                    raise AssertionError(f"call {i} did not queue (it returned {out[i]!r})")
                time.sleep(0.001)
    for thread in threads:
        thread.join(timeout_s)
    return out


def ack_forever(threads: int, first: Callable[[int], int], write: Callable[[int], object]) -> None:
    """Write batches from ``threads`` threads until the process is killed: thread
    ``t`` writes batch ``first(t)``, then the next numbers, each with ``write(n)``,
    and prints ``ack <n>`` (flushed) once ``write`` returned. Never returns."""
    out = threading.Lock()

    def writer(t: int) -> None:
        n = first(t)
        while True:
            write(n)
            with out:
                sys.stdout.write(f"ack {n}\n")
                sys.stdout.flush()
            n += 1

    running = [threading.Thread(target=writer, args=(t,), daemon=True) for t in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()
