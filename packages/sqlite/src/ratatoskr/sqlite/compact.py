"""Compaction: giving a database file's free pages back to the filesystem, in short
incremental steps beside running writers, or in one ``VACUUM``."""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import apsw

from ratatoskr.sqlite.driver import MEMORY_PATH, ConnectionOptions, connect, translate_errors
from ratatoskr.sqlite.errors import ForeignDatabase, StorageUnavailable
from ratatoskr.sqlite.migrations import recorded_planes

__all__ = [
    "COMPACT_STEP_PAGES",
    "CompactReport",
    "Prepare",
    "compact_database",
    "compact_with",
    "file_bytes",
    "incremental_when_new",
]

# Free pages given back per transaction by an incremental compaction (4 MiB of 4 KiB
# pages). Measured at 100k chunks (58k deleted): a writer beside it waited at most
# 0.2-0.4 s (4096-page steps: 0.6-0.8 s), the whole run took the same ~4 s.
COMPACT_STEP_PAGES = 1024
# What a plane rebuilds before the file is vacuumed (inside one write transaction);
# returns the names of the tables it rebuilt.
Prepare = Callable[[apsw.Connection], Sequence[str]]


@dataclass(frozen=True)
class CompactReport:
    """What a compaction did. Sizes are the database file plus its WAL, in bytes."""

    # "incremental_vacuum" (the file has auto_vacuum=INCREMENTAL), "vacuum" (a full
    # rewrite, which also switches the file to INCREMENTAL) or "none" (":memory:").
    method: str
    bytes_before: int
    bytes_after: int
    free_pages_before: int
    free_pages_after: int
    seconds: float
    # Tables the plane rebuilt first (their dead space is not free pages).
    rebuilt: tuple[str, ...] = ()
    # False when a reader of another process kept the WAL from being truncated.
    wal_truncated: bool = True

    @property
    def bytes_reclaimed(self) -> int:
        return self.bytes_before - self.bytes_after


def compact_database(
    path: str, *, plane: str, full: bool = False, prepare: Prepare | None = None
) -> CompactReport:
    """:meth:`Database.compact` for a plane's file given by path (an operator command),
    safe beside a provider serving the same file: it takes SQLite's locks like any
    writer, applies no migration and creates nothing.

    Raises StorageUnavailable when the file does not exist, ForeignDatabase when it
    does not hold ``plane``'s schema (or holds another plane's), and the other
    StorageError subclasses for unusable files.
    """
    if path == MEMORY_PATH or not os.path.isfile(path):
        raise StorageUnavailable("database file does not exist")
    conn = connect(path, ConnectionOptions(load_vec=True))
    try:
        with translate_errors():
            planes = recorded_planes(conn)
        if planes != (plane,):
            held = ", ".join(planes) if planes else "no plane's schema"
            raise ForeignDatabase(f"the file holds {held}, not the {plane} plane")
        lock = threading.Lock()

        @contextlib.contextmanager
        def writer() -> Iterator[apsw.Connection]:
            with lock, translate_errors():
                yield conn

        return compact_with(writer, os.path.abspath(path), full=full, prepare=prepare)
    finally:
        conn.close()


def compact_with(
    writer: Callable[[], contextlib.AbstractContextManager[apsw.Connection]],
    path: str,
    *,
    full: bool,
    prepare: Prepare | None,
) -> CompactReport:
    """The compaction itself; ``writer()`` lends the writing connection (outside any
    transaction) for one step at a time."""
    start = time.perf_counter()
    with writer() as conn:
        before, free_before = file_bytes(path), _pragma(conn, "freelist_count")
    rebuilt: tuple[str, ...] = ()
    if prepare is not None:
        with writer() as conn, _immediate(conn):
            rebuilt = tuple(prepare(conn))
    with writer() as conn:
        incremental = _auto_vacuum(conn) == _AUTO_VACUUM_INCREMENTAL
        free = _pragma(conn, "freelist_count")
    if incremental and not full:
        method = "incremental_vacuum"
        _incremental_steps(writer, free)
    else:
        method = "vacuum"
        with writer() as conn:
            # Takes effect in the rewrite: later compactions are incremental.
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            conn.execute("VACUUM")
    with writer() as conn:
        busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0][0]
        free_after = _pragma(conn, "freelist_count")
    return CompactReport(
        method=method,
        bytes_before=before,
        bytes_after=file_bytes(path),
        free_pages_before=free_before,
        free_pages_after=free_after,
        seconds=time.perf_counter() - start,
        rebuilt=rebuilt,
        wal_truncated=busy == 0,
    )


_AUTO_VACUUM_INCREMENTAL = 2


def _incremental_steps(
    writer: Callable[[], contextlib.AbstractContextManager[apsw.Connection]], free: int
) -> None:
    """Give ``free`` pages back, :data:`COMPACT_STEP_PAGES` per write transaction."""
    # Writers may free pages meanwhile: a bounded number of steps, not "until zero".
    for _step in range(math.ceil(free / COMPACT_STEP_PAGES) + 1):
        with writer() as conn:
            if _pragma(conn, "freelist_count") == 0:
                return
            with _immediate(conn):
                # One page per step of the statement: it must be run to the end.
                conn.execute(f"PRAGMA incremental_vacuum({COMPACT_STEP_PAGES})").fetchall()


@contextlib.contextmanager
def _immediate(conn: apsw.Connection) -> Iterator[None]:
    """A write transaction on ``conn``: committed when the block ends, rolled back on
    any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if not conn.get_autocommit():
            conn.execute("ROLLBACK")
        raise


def _pragma(conn: apsw.Connection, name: str) -> int:
    return int(conn.execute(f"PRAGMA {name}").fetchall()[0][0])  # type: ignore[arg-type]


def _auto_vacuum(conn: apsw.Connection) -> int:
    """The file's auto-vacuum mode. Outside a transaction the pragma answers what the
    connection last read, which another process's VACUUM may have changed since."""
    conn.execute("BEGIN")
    try:
        conn.execute("SELECT 1 FROM sqlite_schema LIMIT 1").fetchall()
        return _pragma(conn, "auto_vacuum")
    finally:
        conn.execute("COMMIT")


def file_bytes(path: str) -> int:
    total = 0
    for name in (path, path + "-wal"):
        with contextlib.suppress(OSError):
            total += os.path.getsize(name)
    return total


def incremental_when_new(conn: apsw.Connection) -> None:
    """Switch a file that holds nothing yet to ``auto_vacuum=INCREMENTAL``, so that
    :meth:`Database.compact` can later give pages back in short steps instead of
    rewriting the file. The mode is fixed once a table exists, and opening in WAL
    mode has already written the header, so a ``VACUUM`` of the empty file sets it
    (instant). A file that holds anything is left exactly as it is."""
    with translate_errors():
        if conn.execute("SELECT 1 FROM sqlite_schema LIMIT 1").fetchall():
            return
        if _pragma(conn, "auto_vacuum") == _AUTO_VACUUM_INCREMENTAL:
            return
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        conn.execute("VACUUM")
