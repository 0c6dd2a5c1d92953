"""A plane's database: one writer connection, per-thread readers, migrations at open.

Planes run store calls in a worker-thread pool, so a connection must be usable
off the thread that created it, and transactions must not interleave. Writes
therefore go through one connection guarded by a lock and always start with
``BEGIN IMMEDIATE`` (a deferred transaction that later upgrades to a writer can
fail with "database is locked" without waiting); reads use a connection of
their own thread, so in WAL mode they never wait for a writer. An in-memory
database exists only inside its one connection, so there every call shares it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import apsw

from ratatoskr.sqlite.driver import (
    MEMORY_PATH,
    ConnectionOptions,
    connect,
    load_sqlite_vec,
    translate_errors,
)
from ratatoskr.sqlite.errors import SchemaMismatch, StorageUnavailable
from ratatoskr.sqlite.migrations import (
    Migration,
    apply_migrations,
    ensure_meta,
    read_meta,
    recorded_planes,
    schema_version,
)


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
        self._writer = connect(path, self.options)
        # The file this database is, so a write can tell when the path no longer
        # names it (see ``_check_file``).
        self._abspath = os.path.abspath(path)
        self._identity = None if self.is_memory else _identity(self._abspath)
        try:
            with self.write() as conn:
                for key, wanted in (meta or {}).items():
                    stored = read_meta(conn, key)
                    if stored is not None and stored != wanted.value:
                        raise SchemaMismatch(wanted.setting, stored, wanted.value)
                apply_migrations(conn, plane, migrations)
                for key, wanted in (meta or {}).items():
                    ensure_meta(conn, key, wanted.value, setting=wanted.setting)
        except BaseException:
            self._writer.close()
            raise

    @contextlib.contextmanager
    def write(self) -> Iterator[apsw.Connection]:
        """A write transaction: committed when the block ends, rolled back on any error."""
        with self._lock:
            self._check_open()
            self._check_file()
            conn = self._writer
            with translate_errors():
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
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
                if not conn.get_autocommit():
                    conn.execute("COMMIT")

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
        """Refuse to write when the path no longer names the file that was opened.

        SQLite keeps writing to an open file after it was deleted (its directory
        removed, a volume unmounted) or replaced by another: every write would be
        acknowledged and then lost when the process exits. One ``stat`` per write
        turns that into an error.
        """
        if self._identity is not None and _identity(self._abspath) != self._identity:
            raise StorageUnavailable("database file was removed or replaced while open")

    def checkpoint(self) -> None:
        """Copy what the WAL holds back into the database file without blocking writers
        or readers (PASSIVE); what a reader still needs stays for a later round. Runs on
        the calling thread's own connection, so this process's writes never wait for
        its fsync."""
        if self.is_memory:
            return
        conn = self._reader()
        with translate_errors():
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def schema_version(self) -> int:
        """The plane's applied schema version."""
        with self.read() as conn:
            return schema_version(conn, self.plane)

    def close(self) -> None:
        """Close every connection; later calls raise StorageUnavailable. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with self._readers_lock:
                readers, self._readers = self._readers, []
            for conn in readers:
                conn.close()
            self._writer.close()


def _identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of ``path``, or None when nothing is there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


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


def inspect_database(
    path: str, *, plane: str, keys: Sequence[str] = (), quick: bool = True
) -> DatabaseReport:
    """Read-only look at ``path``: schema version, fixed settings and an integrity check.

    Never creates the file. Raises StorageError subclasses for unreadable files.
    """
    if not os.path.exists(path):
        return DatabaseReport(path=path, exists=False)
    mode = stat.S_IMODE(os.stat(path).st_mode)
    # Not `connect`: no pragma may change the file. Read-write when allowed, because a
    # read-only reader of a WAL database leaves -wal/-shm files behind, while the last
    # read-write connection removes them on close, leaving the directory as it was.
    writable = os.access(path, os.W_OK) and os.access(
        os.path.dirname(os.path.abspath(path)), os.W_OK
    )
    with translate_errors():
        conn = apsw.Connection(
            path, flags=apsw.SQLITE_OPEN_READWRITE if writable else apsw.SQLITE_OPEN_READONLY
        )
    try:
        with translate_errors():
            conn.set_busy_timeout(ConnectionOptions().busy_timeout_ms)
            load_sqlite_vec(conn)
            check = "quick_check" if quick else "integrity_check"
            rows = conn.execute(f"PRAGMA {check}").fetchall()
            integrity = "ok" if rows == [("ok",)] else "damaged"
            meta = {k: v for k in keys if (v := read_meta(conn, k)) is not None}
            return DatabaseReport(
                path=path,
                exists=True,
                schema_version=schema_version(conn, plane),
                meta=meta,
                integrity=integrity,
                planes=recorded_planes(conn),
                mode=mode,
            )
    finally:
        conn.close()


def same_file(a: str, b: str) -> bool:
    """Whether two configured paths name the same database file (``:memory:`` never does)."""
    if MEMORY_PATH in (a, b):
        return False
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)
