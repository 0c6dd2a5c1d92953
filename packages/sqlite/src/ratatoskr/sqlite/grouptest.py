"""Testing group commit: calls queued behind a held write, so they form one group.

Every plane's group-commit tests need the same set-up: several writes from
threads of their own, queued in a known order while the write lock is held, so
that the first of them leads one group carrying them all.
"""

from __future__ import annotations

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
