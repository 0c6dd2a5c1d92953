"""A readers-writer lock: searches share the index, writes to it are exclusive.

numpy releases the GIL inside a matrix product, so searches from the app's
worker threads can score in parallel; only bringing the index up to date with
the database needs it alone. Writers are preferred: once one waits, new readers
queue behind it, so a stream of searches cannot starve index updates.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class ReadWriteLock:
    """Many readers or one writer; not reentrant."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._waiting_writers = 0

    @contextlib.contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._waiting_writers:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if self._readers == 0:
                    self._cond.notify_all()

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            self._waiting_writers += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._waiting_writers -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()
