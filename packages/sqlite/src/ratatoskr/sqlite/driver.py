"""Connections: the bundled-SQLite driver (apsw), sqlite-vec loading and pragmas.

The standard library's sqlite3 cannot load extensions on many Python builds
(pyenv, python.org, macOS), so every plane goes through apsw, which bundles a
current SQLite with extension loading on every platform it ships wheels for.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

import apsw
import sqlite_vec

from ratatoskr.sqlite.errors import (
    StorageCorrupt,
    StorageError,
    StorageFull,
    StorageReadOnly,
    StorageUnavailable,
)

MEMORY_PATH = ":memory:"
# SQLITE_IOERR | (19 << 8): enlarging the -shm file failed (sqlite3.h).
_SQLITE_IOERR_SHMSIZE = apsw.SQLITE_IOERR_SHMSIZE


@dataclass(frozen=True)
class ConnectionOptions:
    """Per-connection settings; the defaults favour never losing an acknowledged write."""

    busy_timeout_ms: int = 10_000
    # FULL fsyncs the WAL at every commit: an acknowledged write survives power loss,
    # not only a process crash.
    synchronous: str = "FULL"
    # No memory-mapped I/O by default: a mapped file that something else truncates
    # kills the whole process with SIGBUS on the next read (every plane of a combined
    # provider at once); with read() calls the same damage is a StorageCorrupt error.
    mmap_size: int = 0
    # A WAL that grew while readers held old snapshots is truncated back to this many
    # bytes after the next checkpoint that resets it (SQLite never shrinks it otherwise:
    # 4 MB became 98 MB under long reads and stayed).
    journal_size_limit: int = 64 * 1024 * 1024
    # WAL pages after which a commit checkpoints (SQLite's default); 0: never in a
    # commit, for a caller that checkpoints off its hot path.
    wal_autocheckpoint: int = 1000
    load_vec: bool = False
    readonly: bool = False
    max_page_count: int | None = None
    # Free bytes the filesystem keeps for deletes and token records: below it, a write
    # that would grow the file is refused (StorageFull). 0: no reserve. See guard.py.
    disk_reserve_bytes: int = 0
    # Deleted content overwritten with zeros (cells, freed pages, overflow chains), so an
    # erased record leaves no bytes in the file once the WAL is checkpointed (see
    # erasure.py). ON, not FAST: FAST leaves freed pages (a record's overflow chain)
    # as they were. Cost measured in benchmarks/README.md ("Erasure").
    secure_delete: bool = True
    # Concurrent writes of this process share a transaction and its COMMIT (one fsync
    # for several batches, each in its own savepoint; see group.py), at most
    # ``group_max_batches`` each. False: every write commits alone.
    group_commit: bool = True
    group_max_batches: int = 64


def driver_versions() -> dict[str, str]:
    """Versions of the driver and the SQLite it bundles (for `doctor` and bug reports)."""
    return {"apsw": apsw.apsw_version(), "sqlite": apsw.sqlite_lib_version()}


def sqlite_vec_version() -> str:
    """Load sqlite-vec into a scratch connection and report its version."""
    conn = apsw.Connection(MEMORY_PATH)
    try:
        load_sqlite_vec(conn)
        return str(conn.execute("SELECT vec_version()").fetchall()[0][0])
    finally:
        conn.close()


def load_sqlite_vec(conn: apsw.Connection) -> None:
    """Load the sqlite-vec extension into ``conn``, then switch extension loading off again."""
    conn.enable_load_extension(True)
    try:
        conn.load_extension(sqlite_vec.loadable_path())
    finally:
        conn.enable_load_extension(False)


def connect(path: str, options: ConnectionOptions | None = None) -> apsw.Connection:
    """Open ``path`` (or ``":memory:"``) with the house pragmas applied.

    Raises StorageUnavailable / StorageCorrupt / StorageReadOnly with content-free messages.
    """
    opts = options or ConnectionOptions()
    flags = (
        apsw.SQLITE_OPEN_READONLY
        if opts.readonly
        else (apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE)
    )
    # No SQLITE_OPEN_URI: a configured "file:x.db?…" is refused by the provider, and a
    # URI's parameters (a shared cache, another vfs) could bypass the one-file-per-plane
    # and deleted-file rules.
    if path != MEMORY_PATH and not opts.readonly:
        _create_owner_only(path)
    with translate_errors():
        conn = apsw.Connection(path, flags=flags)
        try:
            conn.set_busy_timeout(opts.busy_timeout_ms)
            if opts.load_vec:
                load_sqlite_vec(conn)
            # A read touches the header: a file that is not a database fails here, early.
            conn.execute("PRAGMA schema_version").fetchall()
            if path != MEMORY_PATH and not opts.readonly:
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchall()[0][0]
                if str(mode).lower() != "wal":
                    raise StorageUnavailable("could not switch the database to WAL mode")
            conn.execute(f"PRAGMA synchronous={_checked_synchronous(opts.synchronous)}")
            conn.execute(f"PRAGMA journal_size_limit={int(opts.journal_size_limit)}")
            conn.execute(f"PRAGMA wal_autocheckpoint={int(opts.wal_autocheckpoint)}")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA secure_delete={'ON' if opts.secure_delete else 'OFF'}")
            if path != MEMORY_PATH:
                conn.execute(f"PRAGMA mmap_size={int(opts.mmap_size)}")
            if opts.max_page_count is not None:
                conn.execute(f"PRAGMA max_page_count={int(opts.max_page_count)}")
        except BaseException:
            conn.close()
            raise
    return conn


def _create_owner_only(path: str) -> None:
    """Create a missing database file as 0600 whatever the umask: it holds what agents
    remember about people, and SQLite gives its -wal and -shm files the same mode."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError:
        return  # SQLite's own open reports the problem, typed
    os.close(fd)


def _checked_synchronous(value: str) -> str:
    allowed = {"OFF", "NORMAL", "FULL", "EXTRA"}
    upper = value.upper()
    if upper not in allowed:
        raise ValueError(f"synchronous must be one of {sorted(allowed)}")
    return upper


@contextlib.contextmanager
def translate_errors() -> Iterator[None]:
    """Turn apsw's exceptions into the typed, content-free storage errors."""
    try:
        yield
    except StorageError:
        raise
    except apsw.FullError as exc:
        raise StorageFull("database or disk is full") from exc
    except apsw.ReadOnlyError as exc:
        raise StorageReadOnly("database is read-only") from exc
    except (apsw.CorruptError, apsw.NotADBError) as exc:
        raise StorageCorrupt("database file is corrupt or not a database") from exc
    except (apsw.CantOpenError, apsw.PermissionsError) as exc:
        raise StorageUnavailable("database file cannot be opened") from exc
    except apsw.BusyError as exc:
        raise StorageUnavailable("database stayed locked past the busy timeout") from exc
    except apsw.IOError as exc:
        if getattr(exc, "extendedresult", None) == _SQLITE_IOERR_SHMSIZE:
            # The WAL index could not grow: SQLite's documented sign of a full volume.
            raise StorageFull("database or disk is full") from exc
        raise StorageUnavailable("database I/O error") from exc
