"""A read replica that serves a plane's reads without ever answering from the past.

A streaming standby replays the primary's WAL a little behind it (measured here:
an asynchronous standby showed a just-committed write on the first read 5 times
in 200). A read sent there could miss a write its caller was told had committed
— through this provider or any other. So every read routed to the replica first
asks the primary for its WAL flush position (``pg_current_wal_flush_lsn()``: every
acknowledged commit lies at or below it, whoever committed it), then checks on
the replica that it has replayed that far
(``pg_is_in_recovery() AND pg_last_wal_replay_lsn() >= lsn``), and only then
starts the read there: the read's snapshot, taken after the check, holds every
transaction replayed up to it.

A replica that is behind is waited for up to ``max_wait`` seconds (with
``synchronous_commit = remote_apply`` on the primary naming it as synchronous
standby, it never is); past that, or when it cannot be reached, or when it is no
longer a standby (promoted: then it may be the primary, or a stale one), the read
goes to the primary. The answer is the same either way: same SQL, same grant, same
exactness — only where it is computed changes. The cost is one small round trip
to the primary and one to the replica per read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from psycopg import Cursor

from ratatoskr.postgres.database import Pool, PoolRunner, TxMode
from ratatoskr.storage.errors import StorageUnavailable

if TYPE_CHECKING:
    from ratatoskr.postgres.database import PostgresDatabase

__all__ = ["ReadReplica"]

T = TypeVar("T")
_FLUSH_LSN = b"SELECT pg_current_wal_flush_lsn()::text"
_CAUGHT_UP = (
    b"SELECT pg_is_in_recovery() AND coalesce(pg_last_wal_replay_lsn() >= %s::pg_lsn, false)"
)
_POLL = 0.002


class ReadReplica:
    """The replica's pool and the routing of reads to it (see the module docstring).

    ``served`` and ``fell_back`` count the reads answered here and by the primary."""

    def __init__(self, pool: Pool, *, owns_pool: bool = False, max_wait: float = 0.05) -> None:
        if max_wait < 0:
            raise ValueError("max_wait must not be negative")
        self._runner = PoolRunner(pool, owns_pool=owns_pool)
        self.max_wait = max_wait
        self._count_lock = threading.Lock()
        self.served = 0
        self.fell_back = 0

    @property
    def pool(self) -> Pool:
        return self._runner.pool

    def read(self, primary: PostgresDatabase, work: Callable[[Cursor[Any]], T], mode: TxMode) -> T:
        """``work`` on the replica once it holds every write the primary acknowledged
        before this call, else on ``primary``. Raises what ``primary.run`` raises."""
        lsn = primary.run(lambda cur: _one(cur, _FLUSH_LSN, ()))
        try:
            if self._caught_up(lsn):
                result = self._runner.run(work, mode=mode)
                self._count(served=True)
                return result
        except StorageUnavailable:
            pass  # unreachable, restarting, a read cancelled by recovery: the primary answers
        self._count(served=False)
        return primary.run(work, mode=mode)

    def _caught_up(self, lsn: object) -> bool:
        deadline = time.monotonic() + self.max_wait
        while True:
            if self._runner.run(lambda cur: _one(cur, _CAUGHT_UP, (lsn,))) is True:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL)

    def _count(self, *, served: bool) -> None:
        with self._count_lock:
            if served:
                self.served += 1
            else:
                self.fell_back += 1

    def close(self) -> None:
        """Close the pool if the replica opened it; idempotent."""
        self._runner.close()


def _one(cur: Cursor[Any], statement: bytes, params: tuple[object, ...]) -> object:
    row = cur.execute(statement, params).fetchone()
    return None if row is None else row[0]
