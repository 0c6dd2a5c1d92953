"""Group commit: concurrent writers of one process share a transaction's COMMIT.

A COMMIT with ``synchronous=FULL`` costs an fsync of the WAL, the largest single
cost of a write (≈5 ms of ≈9 on the disk measured in benchmarks/README.md), and
writers of one process take the write lock one after another anyway. So a write
is submitted as a *batch*: a function of the write connection. Batches queue;
the writer at the front of the queue is the *leader*: it takes the write lock,
then every batch queued by then (at most ``max_batches``, its own first), and
runs them in queue order inside one ``BEGIN IMMEDIATE`` transaction, each in a
``SAVEPOINT`` of its own, then commits once and hands each *follower* its
result. A lone writer never waits for company: it leads a group of one.

What each batch keeps:

- **Atomicity.** A batch that raises is rolled back to its savepoint (nothing of
  it stays) and gets its own exception; the others go on. When the transaction
  as a whole cannot commit (the file guard's check, a full disk at COMMIT, an
  I/O error, or an error inside a batch after which SQLite rolled the whole
  transaction back), every batch of the group fails and none is acknowledged.
- **Its checks.** Batches run one after another in one transaction, so each
  sees the writes of the batches before it exactly as if they had committed
  first: the group is serialisable in queue order, and a batch's idempotency
  lookup, revision and grant checks and quota read (all inside the batch) decide
  on the same state a serial run would. A replay of a request recorded earlier
  in the same group is answered from that batch's ledger entry, and both are
  acknowledged only once it is committed.
- **What runs after the commit.** A batch's ``after_commit`` (e.g. mirroring the
  write into an in-process index) runs only when the batch committed, in queue
  order, and groups' in the order they committed; its caller returns after it.
- **The disk reserve** is checked per batch (:class:`~ratatoskr.sqlite.guard.FileGuard`):
  a batch that grows the file below the reserve is refused alone, so a delete
  grouped with it still goes through.

Across processes each process groups its own threads; SQLite's file lock
serialises the groups.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import apsw

from ratatoskr.sqlite.driver import translate_errors
from ratatoskr.sqlite.errors import StorageError, StorageUnavailable
from ratatoskr.sqlite.guard import FileGuard

__all__ = ["DEFAULT_MAX_BATCHES", "Batch", "Group", "Written"]

T = TypeVar("T")

# Batches one COMMIT carries at most: the transaction (and the WAL it leaves for the
# next checkpoint) stays bounded — at the largest batches (8 MiB bodies) a few hundred
# MiB — and the first batch of a group waits for at most this many others' SQL.
DEFAULT_MAX_BATCHES = 64
_SAVEPOINT = "ratatoskr_batch"


@dataclass(frozen=True)
class Written(Generic[T]):
    """What a batch returns: the caller's ``value``, and what to run once the batch
    is committed (never when it is not)."""

    value: T
    after_commit: Callable[[], None] | None = None


Batch = Callable[[apsw.Connection], Written[T]]


class _Ticket:
    __slots__ = ("batch", "done", "error", "written")

    def __init__(self, batch: Batch[Any]) -> None:
        self.batch = batch
        self.done = False
        self.written: Written[Any] | None = None
        self.error: BaseException | None = None


class _GroupLost(Exception):
    """The group's transaction is gone: ``error`` is what every batch in it gets."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error


def _copy(error: BaseException) -> BaseException:
    """The error each batch of a failed group raises (its own object: each caller's
    traceback is its own)."""
    if isinstance(error, StorageError):
        return type(error)(*error.args)
    return StorageUnavailable("the write transaction could not be committed")


class Group:
    """The group-commit queue of one database's writer connection.

    ``transaction`` is the database's write transaction without its COMMIT
    (``BEGIN IMMEDIATE`` under the write lock, the guard's checks at begin), yielding
    the connection and the guard figures; the group commits it itself.
    """

    def __init__(
        self,
        transaction: Callable[[], contextlib.AbstractContextManager[tuple[apsw.Connection, Any]]],
        guard: FileGuard | None,
        *,
        max_batches: int = DEFAULT_MAX_BATCHES,
    ) -> None:
        if max_batches < 1:
            raise ValueError("max_batches must be at least 1")
        self._transaction = transaction
        self._guard = guard
        self.max_batches = max_batches
        self._cond = threading.Condition()
        self._queue: deque[_Ticket] = deque()
        # Held from a group's COMMIT until its after_commit steps ran, taken before the
        # next group may begin: after_commit steps run in commit order, while the next
        # group's SQL already runs.
        self._after = threading.Lock()
        # Groups committed and batches they carried (for tests and benchmarks).
        self.groups = 0
        self.batches = 0

    @property
    def queued(self) -> int:
        """Batches waiting for a group (not yet taken into one)."""
        with self._cond:
            return len(self._queue)

    def submit(self, batch: Batch[T]) -> T:
        """Run ``batch(conn)`` in a write transaction shared with the batches queued
        beside it; return its value once it is committed and its ``after_commit`` ran.

        Raises what ``batch`` raised (nothing of it written), or a StorageError when
        the group's transaction could not be committed (nothing of the group written).
        """
        ticket = _Ticket(batch)
        with self._cond:
            self._queue.append(ticket)
            # Taken into a group (out of the queue, not done yet) or behind others: wait.
            while not ticket.done and not (self._queue and self._queue[0] is ticket):
                self._cond.wait()
        if not ticket.done:
            self._lead()
            with self._cond:
                while not ticket.done:
                    self._cond.wait()
        if ticket.error is not None:
            error, ticket.error = ticket.error, None
            raise error
        assert ticket.written is not None
        value: T = ticket.written.value
        return value

    def _lead(self) -> None:
        """Run the group at the queue's front (this thread's ticket first)."""
        group: list[_Ticket] = []
        failure: BaseException | None = None
        try:
            with self._transaction() as (conn, at_begin):
                with self._cond:
                    group = [self._queue[i] for i in range(min(len(self._queue), self.max_batches))]
                self._run(conn, group, at_begin)
        except _GroupLost as lost:
            failure = lost.error
        except BaseException as exc:
            failure = exc
        if not group:  # the transaction never began: this writer's batch alone fails
            with self._cond:
                group = [self._queue[0]]
        if failure is not None:  # nothing of the group is committed or acknowledged
            for ticket in group:
                if ticket.error is None:
                    ticket.error = _copy(failure)
                ticket.written = None
        self._finish(group, committed=failure is None)

    def _finish(self, group: list[_Ticket], committed: bool) -> None:
        """Let the next group begin, run this one's after_commit steps in order, then
        wake its writers."""
        self._after.acquire()
        try:
            with self._cond:
                for _ in group:
                    self._queue.popleft()
                if committed:
                    self.groups += 1
                    self.batches += sum(1 for t in group if t.written is not None)
                self._cond.notify_all()  # the next front leads
            if committed:
                for ticket in group:
                    step = ticket.written.after_commit if ticket.written is not None else None
                    if step is not None:
                        try:
                            step()
                        except BaseException as exc:  # committed; the caller hears of it
                            ticket.error = exc
        finally:
            self._after.release()
            with self._cond:
                for ticket in group:
                    ticket.done = True
                self._cond.notify_all()

    def _run(self, conn: apsw.Connection, group: list[_Ticket], at_begin: Any) -> None:
        """Each batch in its savepoint (a group of one needs none: its failure rolls the
        transaction back). Raises _GroupLost when the transaction is gone."""
        guard = self._guard if at_begin is not None else None
        if len(group) == 1:
            ticket = group[0]
            try:
                with translate_errors():
                    ticket.written = ticket.batch(conn)
                    if guard is not None:
                        guard.check_growth(conn, at_begin)
            except BaseException as exc:
                ticket.error = exc  # its own error, not the group's copy
                raise
            return
        for ticket in group:
            mark = guard.pages(conn) if guard is not None else None
            with translate_errors():
                conn.execute(f"SAVEPOINT {_SAVEPOINT}")
            try:
                with translate_errors():
                    written = ticket.batch(conn)
                    if guard is not None and mark is not None:
                        guard.check_growth(conn, mark)
            except BaseException as exc:
                ticket.error = exc
                self._undo(conn, exc)
                continue
            with translate_errors():
                conn.execute(f"RELEASE {_SAVEPOINT}")
            ticket.written = written

    @staticmethod
    def _undo(conn: apsw.Connection, error: BaseException) -> None:
        """Roll the failed batch back to its savepoint; raise _GroupLost when SQLite
        already rolled the whole transaction back (or the savepoint cannot be undone)."""
        if conn.get_autocommit():
            raise _GroupLost(error)
        try:
            with translate_errors():
                conn.execute(f"ROLLBACK TO {_SAVEPOINT}")
                conn.execute(f"RELEASE {_SAVEPOINT}")
        except StorageError as exc:
            raise _GroupLost(exc) from None
