"""A plane's schema on a PostgreSQL server: the pool, migrations at open, transactions.

Stores call :meth:`PostgresDatabase.run` with a function of a cursor; ``run``
checks a connection out of the pool, wraps the function in the transaction it
asked for and commits. It runs the function again, on another connection, only
when doing so cannot apply anything twice:

- the connection turned out to be broken before the commit was sent (a pooled
  connection that a server restart or a terminated backend left dead; the
  server rolled the transaction back);
- the server aborted the transaction as a deadlock victim or a serialization
  failure (rolled back, and made to be retried).

A failure while committing is never retried: the outcome is unknown, and the
caller gets ``StorageUnavailable`` (a write retried by its client with the same
idempotency key then replays or applies, exactly once).

A ``write`` transaction's waits are bounded by ``sync_wait`` seconds: a verb's
write (``bound="call"``) answers within it, whatever it waited for (a write slot,
a lock held by a write that waits for the standby, the synchronous standby's
confirmation of its COMMIT); other writes wait at most that long for each lock and
for the standby. Past it: ``SyncStandbyTimeout`` (503, not acknowledged). At most
``write_slots`` writes run at once, so that writes stuck waiting never hold every
connection of the pool (``ratatoskr.postgres.syncwait``).

Every other driver error becomes a typed, content-free ``StorageError``; the
wire's own errors (``RevisionMismatch``, …) raised by the function pass through
after the rollback.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, LiteralString, TypeVar

import psycopg
import psycopg_pool
from psycopg import Connection, Cursor, pq, sql
from psycopg.adapt import AdaptersMap
from psycopg.conninfo import conninfo_to_dict

from ratatoskr.postgres.arrays import register_array_dumper
from ratatoskr.postgres.errors import translate, translate_errors
from ratatoskr.postgres.migrations import (
    MetaSetting,
    Migration,
    apply_migrations,
    check_schema_name,
    needs_migration,
    qualified,
)
from ratatoskr.postgres.syncwait import (
    DEFAULT_SYNC_WAIT,
    Bound,
    SyncStandbyTimeout,
    Watchdog,
    WriteBound,
    WriteSlots,
    lock_timeout_sql,
    watched,
    write_slots_for,
)
from ratatoskr.postgres.vector import register_vector_dumper
from ratatoskr.storage.errors import StorageUnavailable

if TYPE_CHECKING:
    from ratatoskr.postgres.replica import ReadReplica

__all__ = [
    "ADAPTERS",
    "Pool",
    "PoolOptions",
    "PoolRunner",
    "PostgresDatabase",
    "TxMode",
    "on_table",
    "open_pool",
    "open_schema",
]

T = TypeVar("T")
Pool = psycopg_pool.ConnectionPool[Connection[Any]]
TxMode = str  # "autocommit" | "write" | "snapshot"

# Every connection of a ratatoskr pool can send pgvector values (vector.py) and
# prebuilt binary arrays (arrays.py).
ADAPTERS = AdaptersMap(psycopg.adapters)
register_vector_dumper(ADAPTERS)
register_array_dumper(ADAPTERS)

_BEGIN: dict[str, bytes] = {
    "write": b"BEGIN",
    # One snapshot for several statements, and a promise to the server that no write follows.
    "snapshot": b"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
}
_POOL_LOGGER = logging.getLogger("psycopg.pool")
_RETRY_SQLSTATES = frozenset({"40001", "40P01"})
_ATTEMPTS = 3
_WAIT_SLICE = 0.5


@dataclass(frozen=True)
class PoolOptions:
    """Connection pool settings. Size the pools of all processes that share one server
    below its ``max_connections`` (100 by default): processes × stores × ``max_size``."""

    min_size: int = 1
    max_size: int = 8
    # Seconds a call waits for a free connection before StorageUnavailable.
    timeout: float = 10.0
    # Seconds to establish one connection (libpq's connect_timeout, per host of a
    # multi-host DSN); a connect_timeout the DSN itself names wins.
    connect_timeout: int = 10
    application_name: str = "ratatoskr"
    # Seconds the pool keeps retrying (backing off 1, 2, 4 s…) to replace a lost
    # connection before it gives up; the next call asks for a new one at once. Short,
    # so that after a failover a call finds the new primary within about this long
    # instead of waiting out a backoff grown during the outage.
    reconnect_timeout: float = 2.0


def open_pool(dsn: str, options: PoolOptions | None = None) -> Pool:
    """A connection pool on ``dsn`` (a libpq URI or key=value string), opened and with
    ``min_size`` connections made, or StorageUnavailable (no DSN text in the message)."""
    opts = options or PoolOptions()
    # psycopg_pool logs three INFO lines per checkout ("connection requested from …"):
    # at a provider's INFO level that is a log line per call. Quieted unless an
    # operator set the logger's level on purpose.
    if _POOL_LOGGER.level == logging.NOTSET:
        _POOL_LOGGER.setLevel(logging.WARNING)
    if opts.min_size < 0 or opts.max_size < max(1, opts.min_size):
        raise ValueError("pool sizes must satisfy 0 <= min_size <= max_size, max_size >= 1")
    kwargs: dict[str, Any] = {
        # Transactions are explicit (``run``): an autocommit connection makes a
        # single-statement read one round trip.
        "autocommit": True,
        "context": ADAPTERS,
        "application_name": opts.application_name,
    }
    # The DSN's own connect_timeout wins, for each connection and for the wait below.
    named = _dsn_params(dsn)
    wait: float = opts.connect_timeout
    if "connect_timeout" not in named:
        kwargs["connect_timeout"] = opts.connect_timeout
    else:
        with contextlib.suppress(ValueError):  # not a number: libpq refuses the DSN
            wait = float(named["connect_timeout"])
    pool: Pool = psycopg_pool.ConnectionPool(
        dsn,
        min_size=opts.min_size,
        max_size=opts.max_size,
        timeout=opts.timeout,
        reconnect_timeout=opts.reconnect_timeout,
        open=False,
        name=opts.application_name,
        kwargs=kwargs,
    )
    try:
        with translate_errors():
            pool.open(wait=True, timeout=max(float(wait), 1.0))
    except BaseException:
        pool.close()
        raise
    return pool


def _dsn_params(dsn: str) -> dict[str, str]:
    """The parameters ``dsn`` names (none when libpq cannot parse it: connecting will
    then fail with the typed error)."""
    try:
        return {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    except psycopg.ProgrammingError:
        return {}


class _Retry(Exception):
    """The attempt failed in a way that is safe to run again."""


def on_table(table: sql.Composable, text: LiteralString) -> sql.Composed:
    """The statement ``text`` with its ``{t}`` placeholder bound to ``table``.

    Every store, ledger and cache of a schema composes its fixed statements once,
    at construction, through this; the identifiers are quoted by psycopg."""
    return sql.SQL(text).format(t=table)


class PoolRunner:
    """Transactions on one pool (see the module docstring): the primary's, under a
    plane's :class:`PostgresDatabase`, or a read replica's."""

    def __init__(self, pool: Pool, *, owns_pool: bool = False) -> None:
        self._pool = pool
        self._owns_pool = owns_pool
        self._closed = False
        self._close_lock = threading.Lock()
        # Seconds a write's COMMIT may wait for the synchronous standby (None: no bound).
        self.sync_wait: float | None = DEFAULT_SYNC_WAIT
        self._write_slots = WriteSlots(write_slots_for(pool.max_size))
        self._watchdog = Watchdog()
        # When the last write whose commit the standby did not confirm in time ended;
        # None since a write was confirmed (what /readyz falls back on when the
        # server does not show this role its standbys).
        self.unconfirmed_since: float | None = None

    @property
    def pool(self) -> Pool:
        return self._pool

    @property
    def write_slots(self) -> int:
        """Write transactions run at once at most (the rest of the pool is for reads)."""
        return self._write_slots.slots

    def run(
        self,
        work: Callable[[Cursor[Any]], T],
        *,
        mode: TxMode = "autocommit",
        wait: float | None = None,
        bound: Bound = "waits",
    ) -> T:
        """``work(cursor)`` in a transaction of ``mode`` and its commit.

        ``autocommit``: every statement is its own transaction (one statement is one
        snapshot); ``snapshot``: REPEATABLE READ READ ONLY; ``write``: READ
        COMMITTED, committed at the end, after waiting for a write slot, and bounded
        by ``sync_wait`` as ``bound`` says: ``waits``, each lock wait and the
        commit's wait for the synchronous standby; ``call``, the whole call (a
        verb's write); ``none``, nothing (the migrations, the replay cache). ``wait``:
        seconds to wait for a connection (and a write slot), instead of the pool's
        ``timeout``. Raises what ``work`` raises (after rolling back) and
        StorageError subclasses for the driver's errors (SyncStandbyTimeout: not
        acknowledged).
        """
        if self._closed:
            raise StorageUnavailable("the store is closed")
        patience = self._pool.timeout if wait is None else wait
        limit = self.sync_wait
        if mode != "write" or bound == "none" or limit is None:
            return self._run(work, mode, patience, None)
        deadline = None
        if bound == "call":
            deadline = time.monotonic() + limit
            patience = min(patience, limit)
        with self._write_slots.held(patience):
            return self._run(work, mode, patience, WriteBound(limit, deadline))

    def _run(
        self,
        work: Callable[[Cursor[Any]], T],
        mode: TxMode,
        patience: float,
        bound: WriteBound | None,
    ) -> T:
        for attempt in range(_ATTEMPTS):
            last = attempt == _ATTEMPTS - 1
            if bound is not None and bound.deadline is not None:
                patience = min(patience, max(bound.deadline - time.monotonic(), 0.001))
            try:
                with translate_errors(), self._connection(patience) as conn:
                    return self._attempt(conn, work, mode, last, bound)
            except _Retry:
                # Dead connections a restart left in the pool would fail the next
                # attempts too: test the idle ones and let the pool replace them.
                self._pool.check()
        raise AssertionError("unreachable")  # pragma: no cover - the last attempt raises

    @contextlib.contextmanager
    def _connection(self, patience: float) -> Iterator[Connection[Any]]:
        """A pooled connection, as ``pool.connection()`` gives it, but waited for in
        slices: each new request lets the pool start a new connection attempt at once
        (one whose backoff gave up, during a failover, is not retried until asked),
        so a call waiting through a failover gets the new primary's first connection.
        Raises PoolTimeout after ``patience`` seconds."""
        deadline = time.monotonic() + patience
        while True:
            wait = min(_WAIT_SLICE, deadline - time.monotonic())
            try:
                conn = self._pool.getconn(timeout=max(wait, 0.001))
                break
            except psycopg_pool.PoolTimeout:
                if time.monotonic() >= deadline:
                    raise
        try:
            with conn:
                yield conn
        finally:
            self._pool.putconn(conn)

    def _attempt(
        self,
        conn: Connection[Any],
        work: Callable[[Cursor[Any]], T],
        mode: TxMode,
        last: bool,
        bound: WriteBound | None,
    ) -> T:
        """One try of ``work`` on ``conn``, its waits bounded by ``bound`` (a write's)."""
        begin = _BEGIN.get(mode)
        if begin is None and mode != "autocommit":
            raise ValueError(f"unknown transaction mode {mode!r}")
        if begin is None or bound is None:
            return self._transaction(conn, work, begin, last, commit=True)
        try:
            if bound.deadline is None:
                result = self._transaction(
                    conn, work, begin + lock_timeout_sql(bound.limit), last, commit=False
                )
                with watched(conn, bound.limit, self._watchdog):
                    conn.execute(b"COMMIT")
            else:
                with watched(conn, bound.deadline - time.monotonic(), self._watchdog):
                    result = self._transaction(conn, work, begin, last, commit=True)
        except SyncStandbyTimeout:
            self.unconfirmed_since = time.monotonic()
            raise
        self.unconfirmed_since = None
        return result

    @staticmethod
    def _transaction(
        conn: Connection[Any],
        work: Callable[[Cursor[Any]], T],
        begin: bytes | None,
        last: bool,
        *,
        commit: bool,
    ) -> T:
        try:
            with conn.cursor() as cur:
                if begin is not None:
                    cur.execute(begin)
                result = work(cur)
        except psycopg.Error as exc:
            sqlstate = getattr(exc, "sqlstate", None)
            retry = conn.broken or sqlstate in _RETRY_SQLSTATES
            _rollback(conn)
            if retry and not last and not isinstance(exc, psycopg_pool.PoolTimeout):
                raise _Retry from None
            raise translate(exc) from None
        except BaseException:
            _rollback(conn)
            raise
        if begin is not None and commit:
            conn.execute(b"COMMIT")
        return result

    def close(self) -> None:
        """Close the pool if this runner opened it; idempotent. Later calls raise
        StorageUnavailable."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._watchdog.stop()
        if self._owns_pool:
            self._pool.close()


class PostgresDatabase(PoolRunner):
    """One plane's schema on a server, reached through a pool, and optionally a read
    replica that serves the plane's reads (:meth:`read`, :mod:`ratatoskr.postgres.replica`).

    Opening applies the plane's missing migrations (under the advisory lock) and
    checks the fixed settings. Raises ValueError for a bad schema name;
    StorageUnavailable, ForeignDatabase, SchemaTooNew, SchemaMismatch.
    """

    def __init__(
        self,
        pool: Pool,
        *,
        schema: str,
        plane: str,
        migrations: Sequence[Migration],
        meta: Mapping[str, MetaSetting] | None = None,
        owns_pool: bool = False,
    ) -> None:
        super().__init__(pool, owns_pool=owns_pool)
        self.schema = check_schema_name(schema)
        self.plane = plane
        self._replica: ReadReplica | None = None
        wanted = dict(meta or {})

        def probe(cur: Cursor[Any]) -> bool:
            return needs_migration(cur, self.schema, plane, migrations, wanted)

        # Most opens find the schema complete: a read-only look, no lock, no DDL.
        if self.run(probe, mode="snapshot"):
            # Unbounded: another process may hold the migration lock for long.
            self.run(
                lambda cur: apply_migrations(cur, self.schema, plane, migrations, wanted),
                mode="write",
                bound="none",
            )

    def table(self, name: str) -> sql.Composed:
        """``"schema"."name"`` for composing SQL."""
        return qualified(self.schema, name)

    @property
    def replica(self) -> ReadReplica | None:
        return self._replica

    def use_replica(self, replica: ReadReplica) -> None:
        """Serve :meth:`read` from ``replica`` from now on; closing this database closes it."""
        self._replica = replica

    def read(self, work: Callable[[Cursor[Any]], T], *, mode: TxMode = "autocommit") -> T:
        """``work(cursor)``, a read, as :meth:`run` — on the read replica when there is
        one and it has replayed every write acknowledged before this call began
        (else, or when it cannot be reached, on the primary). Only for reads that
        guard no write: a write's checks read in its own transaction."""
        replica = self._replica
        if replica is None:
            return self.run(work, mode=mode)
        return replica.read(self, work, mode)

    def close(self) -> None:
        """Close the pool (and the replica's) if this database opened it; idempotent.
        Later calls raise StorageUnavailable."""
        if self._replica is not None:
            self._replica.close()
        super().close()


def open_schema(
    dsn: str | Pool,
    build: Callable[[PostgresDatabase], T],
    *,
    schema: str,
    plane: str,
    migrations: Sequence[Migration],
    meta: Mapping[str, MetaSetting] | None = None,
    pool_options: PoolOptions | None = None,
) -> T:
    """``build`` of the plane's schema on ``dsn`` — a libpq URI or key=value string
    (a pool is opened, and owned: closing the database closes it), or an open pool to
    share (left open). Whatever fails, opening or ``build``, closes what was opened.

    Raises what :class:`PostgresDatabase`, :func:`open_pool` and ``build`` raise.
    """
    owns = isinstance(dsn, str)
    pool = open_pool(dsn, pool_options) if isinstance(dsn, str) else dsn
    try:
        db = PostgresDatabase(
            pool, schema=schema, plane=plane, migrations=migrations, meta=meta, owns_pool=owns
        )
    except BaseException:
        if owns:
            pool.close()
        raise
    try:
        return build(db)
    except BaseException:
        db.close()
        raise


def _rollback(conn: Connection[Any]) -> None:
    """End a failed transaction so the pool gets the connection back idle."""
    if conn.broken:
        return
    if conn.pgconn.transaction_status in (
        pq.TransactionStatus.INTRANS,
        pq.TransactionStatus.INERROR,
    ):
        # The pool discards a connection it cannot reset.
        with contextlib.suppress(psycopg.Error):
            conn.execute(b"ROLLBACK")
