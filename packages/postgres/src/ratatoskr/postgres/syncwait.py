"""A bound on how long a write waits for the synchronous standby, and room for reads.

With a synchronous standby named (``synchronous_standby_names``) and
``synchronous_commit`` at ``on``, ``remote_write`` or ``remote_apply``, a COMMIT
returns only once the standby has confirmed it. With the standby gone, it waits
— without limit: PostgreSQL has no setting for it. Measured on the pinned
PostgreSQL 18: neither ``statement_timeout`` nor ``transaction_timeout`` ends the
wait (both are set aside before the commit); only a cancel request
(``pg_cancel_backend``, libpq's cancel) does — and it does not roll anything back.
The server answers the COMMIT with success and a ``WARNING: canceling wait for
synchronous replication … The transaction has already committed locally, but
might not have been replicated to the standby``. The row locks the transaction
held are released and its rows become visible.

The runner therefore runs a write with a watch armed (:func:`watched`,
:class:`Watchdog`): a verb's write for its whole transaction (``bound="call"``:
a wait for a row lock that a write stuck on the standby holds is cut off too), any
other write for its COMMIT (and its lock waits by ``lock_timeout``). When the
time is up first, the watchdog cancels the statement and the call raises
:class:`SyncStandbyTimeout` (a ``StorageUnavailable``: 503, retryable): the write
is **not acknowledged**. A cancelled statement rolls back; a cancelled wait for
the standby leaves the write committed on the primary. Whether the cancel reached
the wait or the commit completed a moment before, the answer is the same — never
an acknowledgement the watch could not vouch for — and the connection is closed
rather than pooled, since a cancel still on its way could otherwise cancel the
next call's statement.

What the client's retry with the same idempotency key finds is then the write
committed on the primary: a replay (``ratatoskr.postgres.writes``). A replay is
acknowledged only once the write it replays is on the standby: the ledger's
claim locks the entry it finds (``INSERT … ON CONFLICT DO UPDATE`` locks the
conflicting row even when its ``WHERE`` refuses the update), a row lock is
written to the WAL, so the replay's own commit waits for the standby to confirm
a position after the original write — under the same bound. A retry while the
standby is still away answers 503 again.

:class:`WriteSlots` caps the write transactions of one database at fewer than
its pool's connections, so writes waiting for the standby never hold every
connection: reads, the replay cache's checks and ``/readyz`` keep the rest.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any, Literal, NamedTuple

from psycopg import Connection

from ratatoskr.storage.errors import StorageUnavailable

__all__ = [
    "DEFAULT_SYNC_WAIT",
    "Bound",
    "SyncStandbyTimeout",
    "Watchdog",
    "WriteBound",
    "WriteSlots",
    "lock_timeout_sql",
    "watched",
    "write_slots_for",
]

# Seconds a commit may wait for the synchronous standby (see docs/scaling.md for why 5).
DEFAULT_SYNC_WAIT = 5.0
# A cancel request is one short connection to the server; it cannot take longer than this.
_CANCEL_TIMEOUT = 2.0
# Seconds between the cancels of a write that has not returned yet.
_RECANCEL = 0.2


class SyncStandbyTimeout(StorageUnavailable):
    """The synchronous standby did not confirm a commit in time: the write was not
    acknowledged (it may be committed on the primary only; a retry with the same
    idempotency key replays it once the standby confirms)."""


# How a write's waits are bounded (``PoolRunner.run``): each wait, the whole call, or none.
Bound = Literal["waits", "call", "none"]


class WriteBound(NamedTuple):
    """A write's bound: ``limit`` seconds per wait, or the whole call by ``deadline``
    (a ``time.monotonic()``; None: per wait)."""

    limit: float
    deadline: float | None


def lock_timeout_sql(seconds: float) -> bytes:
    """What follows ``BEGIN`` (one round trip) to bound each lock wait of the
    transaction: the lock may be held by a write that waits for the standby."""
    return b"; SET LOCAL lock_timeout = %d" % max(1, round(seconds * 1000))


@contextlib.contextmanager
def watched(conn: Connection[Any], seconds: float, watchdog: Watchdog) -> Iterator[None]:
    """The block's statements on ``conn`` cut off by ``watchdog`` after ``seconds``
    (see the module docstring): a cancelled statement is rolled back, a cancelled
    wait for the standby leaves its transaction committed on the primary only.

    Raises SyncStandbyTimeout when the watchdog fired, whatever the block did or
    raised (``conn`` is closed then); else what the block raises."""
    watch = watchdog.arm(conn, max(seconds, 0.0))
    try:
        yield
    finally:
        if watch.finish():
            conn.close()
            raise SyncStandbyTimeout(  # this answer replaces any the block raised
                "the write did not complete in time (waiting for a lock or for the "
                "synchronous standby); it is not acknowledged (it may be committed on the "
                "primary only): retry with the same idempotency key"
            )


class _Watch:
    """One write being watched: once its time is up, its statement is cancelled — again
    and again until the write returns, since a cancel that reaches the server between
    two statements (the backend reading the next command) is dropped."""

    __slots__ = ("_conn", "_done", "_fired", "_lock", "finished")

    def __init__(self, conn: Connection[Any]) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.finished = False
        self._fired = False

    def fire(self) -> None:
        while True:
            # Under the lock: finish() waits for a cancel being sent before the caller
            # closes the connection it was sent for; none is sent after finish().
            with self._lock:
                if self.finished:
                    return
                self._fired = True
                # An unreachable server: the statement then fails on its own.
                with contextlib.suppress(Exception):
                    self._conn.cancel_safe(timeout=_CANCEL_TIMEOUT)
            if self._done.wait(_RECANCEL):
                return

    def finish(self) -> bool:
        """Disarm; whether the watch had fired."""
        with self._lock:
            self.finished = True
            self._done.set()
            return self._fired


class Watchdog:
    """One thread that fires the watches whose time is up (a timer thread per commit
    would cost ~0.15 ms a write). Started at the first watch; every deadline is the
    same bound from now, so a new watch wakes the thread only when it is the only
    one, and finished watches are dropped in bulk when the thread wakes."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Watch]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def arm(self, conn: Connection[Any], seconds: float) -> _Watch:
        """Watch ``conn``'s statement: cancelled after ``seconds`` unless finished."""
        watch = _Watch(conn)
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + seconds, next(self._seq), watch))
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(
                    target=self._loop, name="ratatoskr-commit-watchdog", daemon=True
                )
                self._thread.start()
            if self._heap[0][2] is watch:
                self._cond.notify()
        return watch

    def _loop(self) -> None:
        while True:
            with self._cond:
                due = self._next_due()
            if due is None:
                return
            # Its own thread: a cancel is a connection to the server, and others may be due.
            threading.Thread(target=due.fire, daemon=True).start()

    def _next_due(self) -> _Watch | None:
        """The next unfinished watch whose time is up (waiting for it), or None once
        stopped. Called with the condition held."""
        while not self._stopped:
            if not self._heap:
                self._cond.wait()
                continue
            deadline, _, watch = self._heap[0]
            if watch.finished:
                heapq.heappop(self._heap)
                continue
            delay = deadline - time.monotonic()
            if delay > 0:
                self._cond.wait(delay)
                continue
            heapq.heappop(self._heap)
            return watch
        return None

    def stop(self) -> None:
        """End the thread (watches still armed are never fired); idempotent."""
        with self._cond:
            self._stopped = True
            self._cond.notify()


def write_slots_for(pool_size: int) -> int:
    """How many write transactions a database on a pool of ``pool_size`` connections
    runs at once: a quarter of the pool (at least one) is kept for everything else;
    a pool of one connection has nothing to keep."""
    return max(1, pool_size - max(1, pool_size // 4))


class WriteSlots:
    """A counting cap on concurrent write transactions, waited for up to a timeout."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("a database needs at least one write slot")
        self.slots = slots
        self._free = threading.BoundedSemaphore(slots)

    @contextlib.contextmanager
    def held(self, timeout: float) -> Iterator[None]:
        """Hold one slot for the block. Raises StorageUnavailable when none freed up
        within ``timeout`` seconds."""
        if not self._free.acquire(timeout=max(timeout, 0.0)):
            raise StorageUnavailable(
                "every write slot is taken (writes are waiting for the database or its "
                "synchronous standby); retry"
            )
        try:
            yield
        finally:
            self._free.release()
