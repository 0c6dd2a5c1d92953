"""A plane's database: one writer connection, per-thread readers, migrations at open.

Planes run store calls in a worker-thread pool, so a connection must be usable
off the thread that created it, and transactions must not interleave. Writes
therefore go through one connection guarded by a lock and always start with
``BEGIN IMMEDIATE`` (a deferred transaction that later upgrades to a writer can
fail with "database is locked" without waiting); reads use a connection of
their own thread, so in WAL mode they never wait for a writer. A plane's batches go
through :meth:`Database.write_batch`, where concurrent ones share a transaction and
its COMMIT (:mod:`ratatoskr.sqlite.group`). An in-memory
database exists only inside its one connection, so there every call shares it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import apsw

from ratatoskr.sqlite.compact import (
    COMPACT_STEP_PAGES,
    CompactReport,
    Prepare,
    compact_database,
    compact_with,
    file_bytes,
    incremental_when_new,
)
from ratatoskr.sqlite.driver import (
    MEMORY_PATH,
    ConnectionOptions,
    connect,
    load_sqlite_vec,
    translate_errors,
)
from ratatoskr.sqlite.erasure import BACKGROUND_BUSY_MS, Eraser
from ratatoskr.sqlite.errors import SchemaMismatch, StorageError, StorageUnavailable
from ratatoskr.sqlite.group import Batch, Group, Written
from ratatoskr.sqlite.guard import FileGuard
from ratatoskr.sqlite.migrations import (
    Migration,
    apply_migrations,
    ensure_meta,
    read_meta,
    recorded_planes,
    schema_version,
)
from ratatoskr.sqlite.temps import remove_stale_temps

T = TypeVar("T")

# Compaction lives in its own module; these names stay importable from here.
__all__ = [
    "COMPACT_STEP_PAGES",
    "INTEGRITY_SKIPPED",
    "CompactReport",
    "Database",
    "DatabaseReport",
    "MetaSetting",
    "Prepare",
    "Written",
    "compact_database",
    "inspect_database",
    "same_file",
]


@dataclass(frozen=True)
class MetaSetting:
    """A setting fixed when the file is created (``setting`` is the name users know it by)."""

    value: str
    setting: str


class Database:
    """The open database of one plane."""

    def __init__(
        self,
        path: str,
        *,
        plane: str,
        migrations: Sequence[Migration],
        meta: Mapping[str, MetaSetting] | None = None,
        options: ConnectionOptions | None = None,
    ) -> None:
        """Open (creating if needed) and migrate ``path``.

        Raises StorageUnavailable when the directory is missing, SchemaMismatch when
        a fixed setting differs from the file's (the file is left untouched), and the
        other StorageError types for unreadable, corrupt or read-only files.
        """
        self.path = path
        self.plane = plane
        self.options = options or ConnectionOptions()
        self.is_memory = path == MEMORY_PATH
        if not self.is_memory:
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent):
                raise StorageUnavailable("database directory does not exist")
        self._lock = threading.Lock()
        self._local = threading.local()
        self._readers: list[apsw.Connection] = []
        self._readers_lock = threading.Lock()
        self._closed = False
        # Erasures pending a truncating checkpoint (see erasure.py): a store calls
        # ``erasure.erased()`` after a delete commits.
        self.erasure = Eraser(self.truncate_wal)
        if not self.is_memory and not self.options.readonly:
            # What a killed backup or restore left beside the file goes before it opens
            # (a restore's parked -wal goes back to it first: see temps.py).
            remove_stale_temps(os.path.dirname(os.path.abspath(path)))
        self._writer = connect(path, self.options)
        # The files this database is, so a write can tell when the path no longer
        # names them, and the disk's reserve (see ``guard.py``).
        self._abspath = os.path.abspath(path)
        # The schema is written whatever the reserve (a provider starts on a nearly full
        # disk and answers reads); the reserve applies from the first write after it.
        self._guard = None if self.is_memory else FileGuard(self._abspath)
        try:
            self._set_up(migrations, meta or {})
        except BaseException:
            self._writer.close()
            raise
        if self._guard is not None:
            self._guard.reserve_bytes = self.options.disk_reserve_bytes
            # And the files a server found at its start (a worker started later:
            # guard.py); its set-up wrote nothing when the parent had migrated them.
            self._guard.expect()
        self._group = (
            Group(self._transaction, self._guard, max_batches=self.options.group_max_batches)
            if self.options.group_commit
            else None
        )

    def _set_up(self, migrations: Sequence[Migration], meta: Mapping[str, MetaSetting]) -> None:
        """Migrate the file, its fixed settings checked first (SchemaMismatch before
        anything is written) and recorded."""
        if not self.is_memory and not self.options.readonly:
            incremental_when_new(self._writer)
        with self.write() as conn:
            for key, wanted in meta.items():
                stored = read_meta(conn, key)
                if stored is not None and stored != wanted.value:
                    raise SchemaMismatch(wanted.setting, stored, wanted.value)
            apply_migrations(conn, self.plane, migrations)
            for key, wanted in meta.items():
                ensure_meta(conn, key, wanted.value, setting=wanted.setting)

    @property
    def group(self) -> Group | None:
        """The group-commit queue (None when group commit is off)."""
        return self._group

    @contextlib.contextmanager
    def write(self) -> Iterator[apsw.Connection]:
        """A write transaction: committed when the block ends, rolled back on any error."""
        with self._transaction() as (conn, at_begin):
            yield conn
            if self._guard is not None and at_begin is not None:
                self._guard.check_growth(conn, at_begin)

    def write_batch(self, batch: Batch[T]) -> T:
        """Run ``batch(conn)`` in a write transaction and return its value once committed,
        after its ``after_commit`` step ran (only then, and never when it fails).

        With group commit on (:attr:`ConnectionOptions.group_commit`), concurrent batches
        of this process share one transaction and its COMMIT, each in a savepoint of its
        own (see :mod:`ratatoskr.sqlite.group`); off, each has a transaction of its own.
        Raises what ``batch`` raised (nothing of it written), or StorageError subclasses.
        """
        if self._group is not None:
            return self._group.submit(batch)
        with self.write() as conn:
            written = batch(conn)
        if written.after_commit is not None:
            written.after_commit()
        return written.value

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[tuple[apsw.Connection, tuple[int, int] | None]]:
        """``BEGIN IMMEDIATE`` under the write lock, yielding the connection and the
        guard's page figures when the disk is below its reserve (None otherwise); the
        files are checked and the transaction committed when the block ends, rolled
        back on any error. The caller checks the reserve (per batch, in a group)."""
        with self._lock:
            self._check_open()
            guard = self._guard
            if guard is not None:
                guard.check_main()
            conn = self._writer
            with translate_errors():
                conn.execute("BEGIN IMMEDIATE")
                try:
                    at_begin = guard.begin(conn) if guard is not None else None
                    yield conn, at_begin
                    # The write lock is held: no checkpoint of another process can be
                    # rewriting the WAL now, and the files are checked last.
                    if guard is not None:
                        guard.check_files()
                except BaseException:
                    if not conn.get_autocommit():
                        conn.execute("ROLLBACK")
                    raise
                try:
                    conn.execute("COMMIT")
                except BaseException:
                    if not conn.get_autocommit():
                        conn.execute("ROLLBACK")
                    raise

    @contextlib.contextmanager
    def read(self) -> Iterator[apsw.Connection]:
        """A read transaction: one consistent snapshot for the whole block."""
        if self.is_memory:
            with self._lock:
                self._check_open()
                with translate_errors():
                    yield self._writer
            return
        conn = self._reader()
        with translate_errors():
            if not conn.get_autocommit():  # nested read in the same thread: reuse the snapshot
                yield conn
                return
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                try:
                    if not conn.get_autocommit():
                        conn.execute("COMMIT")
                finally:
                    if self._closed:  # closed while this read ran: its connection is ours
                        self._local.conn = None
                        conn.close()

    def read_rows(self, sql: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        """The rows of one statement: what :meth:`read` would give it, without the BEGIN
        and COMMIT around it (one statement is a snapshot of its own; inside a read of
        this thread, that read's). A third of a point lookup's time (the token cache's
        ``seen``, on the event loop for every call)."""
        if self.is_memory:
            with self.read() as conn:
                return list(conn.execute(sql, params).fetchall())
        conn = self._reader()
        with translate_errors():
            try:
                return list(conn.execute(sql, params).fetchall())
            finally:
                if self._closed and conn.get_autocommit():  # closed meanwhile: ours to close
                    self._local.conn = None
                    conn.close()

    def _reader(self) -> apsw.Connection:
        self._check_open()
        conn: apsw.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path, self.options)
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def _check_open(self) -> None:
        if self._closed:
            raise StorageUnavailable("database is closed")

    def _check_file(self) -> None:
        """Refuse to write when the path no longer names the file that was opened, or
        its ``-wal``/``-shm`` are not the ones SQLite has open.

        SQLite keeps writing to an open file after it was deleted (its directory
        removed, a volume unmounted) or replaced by another: every write would be
        acknowledged and then lost when the process exits. A few ``stat`` calls per
        write turn that into an error (see ``guard.py``).
        """
        if self._guard is not None:
            self._guard.check_files()

    def checkpoint(self) -> None:
        """Copy what the WAL holds back into the database file without blocking writers
        or readers (PASSIVE); what a reader still needs stays for a later round. Runs on
        the calling thread's own connection, so this process's writes never wait for
        its fsync."""
        if self.is_memory:
            return
        if self._guard is not None:  # never from files not the server's (guard.py)
            self._guard.check_opened()
        conn = self._reader()
        with translate_errors():
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def truncate_wal(self, busy_ms: int) -> bool:
        """Checkpoint the whole WAL into the file and cut it to zero bytes
        (``wal_checkpoint(TRUNCATE)``) on the writer connection, waiting at most
        ``busy_ms`` for readers of older snapshots (of any process); True when the WAL
        is empty afterwards. This process's writes wait meanwhile (the checkpoint holds
        the write lock anyway). Raises StorageError subclasses."""
        if self.is_memory:
            return True
        with self._lock:
            self._check_open()
            if self._guard is not None:
                self._guard.check_opened()
            conn = self._writer
            with translate_errors():
                conn.set_busy_timeout(max(0, int(busy_ms)))
                try:
                    busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0][0]
                finally:
                    conn.set_busy_timeout(self.options.busy_timeout_ms)
        return busy == 0

    def compact(self, *, full: bool = False, prepare: Prepare | None = None) -> CompactReport:
        """Give the file's free pages back to the filesystem (deleted rows leave them;
        SQLite reuses them for later writes but never shrinks the file by itself).

        A file with ``auto_vacuum=INCREMENTAL`` (every file this library creates) is
        compacted by ``PRAGMA incremental_vacuum`` in steps of ``COMPACT_STEP_PAGES``,
        each its own short write transaction, so writes of this and other processes go on
        between steps. Any other file, or ``full=True``, gets a ``VACUUM``: the whole
        file rewritten in one transaction (writes wait; the WAL and a temporary copy
        grow to the file's size), which also switches it to INCREMENTAL for next time.
        ``prepare`` (a plane's own rebuild, e.g. of a sqlite-vec table) runs first in a
        write transaction. The WAL is checkpointed and truncated at the end; readers
        are never blocked. Raises StorageError subclasses (StorageUnavailable when the
        database is closed or another process held the lock past the busy timeout).
        """
        if self.is_memory:
            self._check_open()
            start = time.perf_counter()
            rebuilt: tuple[str, ...] = ()
            if prepare is not None:
                with self.write() as conn:
                    rebuilt = tuple(prepare(conn))
            return CompactReport("none", 0, 0, 0, 0, time.perf_counter() - start, rebuilt)

        @contextlib.contextmanager
        def writer() -> Iterator[apsw.Connection]:
            with self._lock:
                self._check_open()
                self._check_file()
                with translate_errors():
                    yield self._writer

        return compact_with(writer, self._abspath, full=full, prepare=prepare)

    def schema_version(self) -> int:
        """The plane's applied schema version."""
        with self.read() as conn:
            return schema_version(conn, self.plane)

    def close(self) -> None:
        """Close every connection; later calls raise StorageUnavailable. Idempotent.

        Waits for a write in progress. A read in progress on another thread keeps its
        connection until it ends, and that thread closes it then (apsw refuses to close
        a connection another thread is using). An erasure still pending gets one last
        truncating checkpoint."""
        self.erasure.stop()
        if self.erasure.pending and not self._closed:
            with contextlib.suppress(StorageError):
                self.truncate_wal(BACKGROUND_BUSY_MS)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with self._readers_lock:
                readers, self._readers = self._readers, []
            try:
                for conn in readers:
                    # A reader busy on another thread is closed by that thread when
                    # its read ends (see ``read``).
                    with contextlib.suppress(apsw.ThreadingViolationError):
                        conn.close()
            finally:
                self._writer.close()


@dataclass
class DatabaseReport:
    """What `doctor` learns about a database file without changing it."""

    path: str
    exists: bool
    schema_version: int = 0
    meta: dict[str, str] = field(default_factory=dict)
    integrity: str = "not checked"
    # Every plane whose migrations the file records (a plane's file holds only its own).
    planes: tuple[str, ...] = ()
    # Permission bits of the file (``stat.S_IMODE``).
    mode: int = 0
    # What the plane's own probe read (None: no probe, or the plane's schema is absent).
    probed: object = None


# DatabaseReport.integrity of a file too large for the check asked for.
INTEGRITY_SKIPPED = "not checked (larger than the start check's limit)"


def inspect_database(
    path: str,
    *,
    plane: str,
    keys: Sequence[str] = (),
    quick: bool = True,
    probe: Callable[[apsw.Connection], object] | None = None,
    check_limit: int | None = None,
) -> DatabaseReport:
    """Read-only look at ``path``: schema version, fixed settings and an integrity check;
    ``probe(conn)`` too, when given and the file holds ``plane``'s schema intact (a
    plane's read-only look at what it keeps, e.g. the memory index's cache).

    The integrity check reads every page of the file. With ``check_limit`` (bytes), a
    file larger than that together with its ``-wal`` is not checked (``integrity`` is
    :data:`INTEGRITY_SKIPPED`): what a provider's start does, so that a start does not
    read gigabytes (SQLite still refuses a damaged page when it is read, and ``doctor``
    checks the whole file).

    Never creates the file. Raises StorageError subclasses for unreadable files.
    """
    if not os.path.exists(path):
        return DatabaseReport(path=path, exists=False)
    mode = stat.S_IMODE(os.stat(path).st_mode)
    checked = check_limit is None or file_bytes(path) <= check_limit
    conn = _open_to_look(path)
    try:
        with translate_errors():
            conn.set_busy_timeout(ConnectionOptions().busy_timeout_ms)
            load_sqlite_vec(conn)
            integrity = _integrity(conn, quick=quick) if checked else INTEGRITY_SKIPPED
            meta = {k: v for k in keys if (v := read_meta(conn, k)) is not None}
            version = schema_version(conn, plane)
            planes = recorded_planes(conn)
            usable = integrity in ("ok", INTEGRITY_SKIPPED) and version > 0 and planes == (plane,)
            return DatabaseReport(
                path=path,
                exists=True,
                schema_version=version,
                meta=meta,
                integrity=integrity,
                planes=planes,
                mode=mode,
                probed=probe(conn) if probe is not None and usable else None,
            )
    finally:
        conn.close()


def _open_to_look(path: str) -> apsw.Connection:
    """A connection to ``path`` that leaves the file and its directory as they were."""
    # Not `connect`: no pragma may change the file. Read-write when allowed and no
    # -wal file is there, because a read-only reader of a WAL database leaves -wal/-shm
    # files behind, while the last read-write connection removes them on close, leaving
    # the directory as it was. With a -wal file there (a writer running, or one that
    # died), read-only: the last read-write connection would checkpoint it into the
    # database and delete it on close, changing the file a look must leave alone.
    writable = (
        os.access(path, os.W_OK)
        and os.access(os.path.dirname(os.path.abspath(path)), os.W_OK)
        and not os.path.exists(f"{path}-wal")
    )
    with translate_errors():
        return apsw.Connection(
            path, flags=apsw.SQLITE_OPEN_READWRITE if writable else apsw.SQLITE_OPEN_READONLY
        )


def _integrity(conn: apsw.Connection, *, quick: bool) -> str:
    """``ok`` or ``damaged``: SQLite's quick (or full) check of every page."""
    check = "quick_check" if quick else "integrity_check"
    rows = conn.execute(f"PRAGMA {check}").fetchall()
    return "ok" if rows == [("ok",)] else "damaged"


def same_file(a: str, b: str) -> bool:
    """Whether two configured paths name the same database file (``:memory:`` never does)."""
    if MEMORY_PATH in (a, b):
        return False
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)
