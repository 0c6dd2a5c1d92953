"""Database files as files: opening one without changing it, identities, durable renames
(temporary copies: ``temps.py``)."""

from __future__ import annotations

import os

import apsw

from ratatoskr.sqlite.driver import ConnectionOptions, load_sqlite_vec, translate_errors
from ratatoskr.sqlite.errors import StorageUnavailable

__all__ = [
    "SIDECAR_SUFFIXES",
    "file_identity",
    "fsync_directory",
    "fsync_file",
    "open_existing",
]

# The files SQLite keeps beside a database: its WAL, the WAL index, a rollback journal.
SIDECAR_SUFFIXES = ("-wal", "-shm", "-journal")


def file_identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of ``path``, or None when nothing is there: what tells a file
    that was replaced or deleted behind an open handle from the one that was opened."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def open_existing(path: str, *, load_vec: bool = True) -> apsw.Connection:
    """Open an existing database file without creating it or setting any pragma that
    writes (not ``connect``). Read-write when the file and its directory allow it: a
    read-only reader of a WAL database leaves its ``-wal``/``-shm`` behind, while the
    last read-write connection removes them on close, leaving the directory as it was.
    The caller runs only reads on it unless the file is its own.

    Raises StorageUnavailable / StorageCorrupt (content-free) when it cannot be opened.
    """
    if not os.path.isfile(path):
        raise StorageUnavailable("database file does not exist")
    writable = os.access(path, os.W_OK) and os.access(
        os.path.dirname(os.path.abspath(path)), os.W_OK
    )
    flags = apsw.SQLITE_OPEN_READWRITE if writable else apsw.SQLITE_OPEN_READONLY
    with translate_errors():
        conn = apsw.Connection(path, flags=flags)
        try:
            conn.set_busy_timeout(ConnectionOptions().busy_timeout_ms)
            if load_vec:
                load_sqlite_vec(conn)
            # A file that is not a database fails here, typed.
            conn.execute("PRAGMA schema_version").fetchall()
        except BaseException:
            conn.close()
            raise
    return conn


def fsync_file(path: str) -> None:
    """Flush ``path``'s data to stable storage (SQLite does not fsync a VACUUM INTO file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(path: str) -> None:
    """Make a rename in ``path``'s directory durable (where the platform allows it)."""
    parent = os.path.dirname(os.path.abspath(path))
    try:
        fd = os.open(parent, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms that cannot open a directory
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some filesystems refuse fsync on a directory
        pass
    finally:
        os.close(fd)
