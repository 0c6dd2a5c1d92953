"""Erasure: what a plane deleted leaves no bytes in its live files.

Three things together make a committed delete disappear from the files:

- ``secure_delete`` (every connection, see :mod:`ratatoskr.sqlite.driver`): the
  pages a delete writes carry zeros where the deleted cells were, and pages it
  frees (a long record's overflow chain, an emptied leaf) are zeroed;
- those pages are new frames in the ``-wal``; the database file, and the WAL's
  older frames, still hold the content until a **truncating checkpoint**
  (``PRAGMA wal_checkpoint(TRUNCATE)``) copies the zeroed pages over them and cuts
  the ``-wal`` to zero bytes;
- a plane's own caches beside the file (the memory index's sidecar) are written
  again without the erased records (the plane's ``before`` step).

A truncating checkpoint must wait until no reader, in any process, holds a
snapshot older than the WAL's end, and it holds the write lock while it runs, so
it is not done inside the deleting write: :meth:`Eraser.erased` marks an erasure
pending, and a daemon thread flushes it :data:`FLUSH_DELAY_S` later, with a short
busy timeout, again every :data:`RETRY_S` while readers keep it from finishing.
``forget`` flushes at once and waits (:meth:`Eraser.flush`). The bound, as
documented: after ``delete_many`` and retention, the files are clean within
~:data:`FLUSH_DELAY_S` s of the commit, or at the first retry at which no reader
of an older snapshot is left (searches hold one for milliseconds).

Only live files are covered: a file's old blocks freed by a truncation or a
rename are not scrubbed on the disk (that is the filesystem's and the disk's
encryption's business), and backups taken before keep what they held.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

import apsw

from ratatoskr.sqlite.errors import StorageError

# Seconds from an erasure's commit to the truncating checkpoint that flushes it (a
# burst of deletes shares one), and between retries while readers hold it off.
FLUSH_DELAY_S = 1.0
RETRY_S = 1.0
# How long one background attempt waits for readers of older snapshots (the
# write lock is held meanwhile: this process's writers wait that long at most).
BACKGROUND_BUSY_MS = 200
# How long a flush asked for by ``forget`` waits for them.
FOREGROUND_BUSY_MS = 10_000


# The page cache an erasing transaction may fill, at most (KiB).
ROOM_MAX_KIB = 64 * 1024


def make_room(conn: apsw.Connection, pages: int) -> None:
    """Let ``conn``'s page cache hold ``pages`` pages (never less than it holds now,
    never more than :data:`ROOM_MAX_KIB`), before a delete that frees about that many.

    ``secure_delete`` writes every page a delete frees (zeros): the page stays dirty
    in the cache until the commit. In SQLite's default cache (2 MB: 500 pages of
    4 KB) a delete of 500 one-page records filled it with them and pushed out the
    pages the next statement reads (sqlite-vec walks a vector chunk's blob of
    ~380 overflow pages to zero one slot), which it then read again: measured, a
    third of secure_delete's CPU cost on ``delete_many`` was those re-reads, not
    the zeroing. The cache only grows (to the largest erasure seen on this
    connection), and a cache page costs nothing until a page is read into it."""
    page_size = int(conn.execute("PRAGMA page_size").fetchall()[0][0])  # type: ignore[arg-type]
    current = int(conn.execute("PRAGMA cache_size").fetchall()[0][0])  # type: ignore[arg-type]
    have_kib = current * page_size // 1024 if current > 0 else -current
    want_kib = min(ROOM_MAX_KIB, pages * page_size // 1024)
    if want_kib > have_kib:
        conn.execute(f"PRAGMA cache_size={-int(want_kib)}")


class Eraser:
    """The pending erasure of one database and the thread that flushes it.

    ``truncate(busy_ms)`` runs the truncating checkpoint and says whether the WAL is
    now empty; ``before()`` (optional, set by the plane) rewrites the plane's caches
    beside the file first. Neither may raise anything but StorageError or OSError
    (a failed attempt stays pending and is retried).
    """

    def __init__(
        self,
        truncate: Callable[[int], bool],
        *,
        delay_s: float = FLUSH_DELAY_S,
        retry_s: float = RETRY_S,
    ) -> None:
        self._truncate = truncate
        self.before: Callable[[], None] | None = None
        self._delay_s = delay_s
        self._retry_s = retry_s
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._pending = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Flushes that left the files clean (for tests and operators).
        self.flushed = 0

    @property
    def pending(self) -> bool:
        return self._pending

    def erased(self) -> None:
        """An erasure committed: flush it in the background (starting the thread on
        first use)."""
        with self._lock:
            if self._stop.is_set():
                return
            self._pending = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="ratatoskr-erasure", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def flush(self, busy_ms: int = FOREGROUND_BUSY_MS) -> bool:
        """Rewrite the plane's caches, then checkpoint and truncate the WAL, now; True
        when the WAL is empty after it (nothing pending any more), False when a reader
        held an older snapshot for ``busy_ms`` (still pending: retried)."""
        with self._flush_lock:
            with self._lock:
                self._pending = False
            try:
                if self.before is not None:
                    self.before()
                done = self._truncate(busy_ms)
            except (StorageError, OSError):
                done = False
            if done:
                self.flushed += 1
            else:
                with self._lock:
                    self._pending = True
                self._wake.set()
            return done

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            # Let a burst of deletes commit first: one flush covers them all.
            while self._pending and not self._stop.wait(self._delay_s):
                if self.flush(BACKGROUND_BUSY_MS):
                    break
                self._wake.clear()
                if self._stop.wait(max(0.0, self._retry_s - self._delay_s)):
                    return

    def stop(self) -> None:
        """Stop the thread (waiting for a flush in progress); idempotent. What is still
        pending is left to the caller (a close flushes it once more)."""
        with self._lock:
            self._stop.set()
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            with contextlib.suppress(RuntimeError):
                thread.join(timeout=30)
