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


class _Reading:
    """The context manager of :meth:`ReadWriteLock.read` (a class, not a generator:
    every search takes the lock)."""

    __slots__ = ("_lock",)

    def __init__(self, lock: ReadWriteLock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        self._lock._acquire_read()

    def __exit__(self, *exc: object) -> None:
        self._lock._release_read()


class ReadWriteLock:
    """Many readers or one writer; not reentrant."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._cond = threading.Condition(self._mutex)
        self._readers = 0
        self._writer = False
        self._waiting_writers = 0
        self._reading = _Reading(self)

    def read(self) -> _Reading:
        """Hold the lock shared for a ``with`` block."""
        return self._reading

    def _acquire_read(self) -> None:
        with self._mutex:
            while self._writer or self._waiting_writers:
                self._cond.wait()
            self._readers += 1

    def _release_read(self) -> None:
        with self._mutex:
            self._readers -= 1
            # Only a writer waits for the readers to leave.
            if self._readers == 0 and self._waiting_writers:
                self._cond.notify_all()

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        """Hold the lock alone for a ``with`` block."""
        with self._cond:
            self._waiting_writers += 1
            acquired = False
            try:
                while self._writer or self._readers:
                    self._cond.wait()
                acquired = True
            finally:
                self._waiting_writers -= 1
                if not acquired and not self._waiting_writers:
                    # The last waiting writer left without the lock (an exception
                    # while it waited): the readers queued behind it may go.
                    self._cond.notify_all()
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()
