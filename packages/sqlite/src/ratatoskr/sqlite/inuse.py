"""Whether another process has a database open, and holding it so none can open it.

SQLite's own locks answer this, read from outside SQLite. ``BEGIN EXCLUSIVE`` with
a zero busy timeout does not: in WAL mode an exclusive transaction excludes other
*writers* only, so it succeeds beside an idle provider and, between two commits,
beside a writing one (measured: it succeeded in both cases). What a WAL
connection does hold, from its first statement until it closes, whether idle or
busy, is (SQLite's ``os_unix.c``):

- a POSIX read lock on the database file's SHARED range (``PENDING_BYTE + 2``,
  510 bytes) — in WAL mode the SHARED lock is never dropped between transactions;
- a POSIX read lock on the "dead man switch" byte of the ``-shm`` file (offset
  128), held by every process that has the WAL index mapped.

:func:`claim_databases` takes write locks on both (with the PENDING and
RESERVED bytes, and the WAL index's lock bytes 120–128) without waiting. If
any other process holds either, the claim fails with :class:`DatabaseInUse`
(naming the holder's pid on Linux); if it succeeds, no SQLite connection
anywhere on this host can open the file until the claim ends, because opening
needs the SHARED lock first. So a restore can check and replace a file with no
window in between.

Limits: POSIX locks are per process, so a connection *in the calling process* is
invisible (and closing a descriptor of a locked file drops that process's locks:
never claim a file this process has open in SQLite). They are per host: a
provider on another machine sharing the file over NFS or SMB is not seen (SQLite
on a network filesystem is unsupported anyway). A connection that was opened but
never ran a statement holds nothing (ratatoskr's stores always migrate at open).
Windows has no ``fcntl``: there the claim refuses rather than guess.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
import sys
from collections.abc import Iterator, Sequence

from ratatoskr.sqlite.errors import StorageError, StorageReadOnly, StorageUnavailable

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["DatabaseInUse", "claim_databases", "database_in_use"]

# os_unix.c: the lock bytes of a database file, beyond any real page.
PENDING_BYTE = 0x40000000
# PENDING, RESERVED, then the SHARED range (SHARED_SIZE = 510 bytes).
DB_LOCK_SPAN = 2 + 510
# The -shm file: WRITE, CHECKPOINT, RECOVER and five READ locks at 120..127, then the
# dead man switch at 128 (UNIX_SHM_BASE = (22 + SQLITE_SHM_NLOCK) * 4).
SHM_LOCK_START = 120
SHM_LOCK_SPAN = 9
_IN_USE_ERRNOS = (errno.EACCES, errno.EAGAIN)


class DatabaseInUse(StorageError):
    """Another process has the database file open (``pid`` when the OS says which)."""

    def __init__(self, pid: int | None) -> None:
        who = f" (pid {pid})" if pid else ""
        super().__init__(f"database file is open in another process{who}")
        self.pid = pid


def _targets(db_path: str) -> list[tuple[str, int, int]]:
    return [
        (db_path, PENDING_BYTE, DB_LOCK_SPAN),
        (f"{db_path}-shm", SHM_LOCK_START, SHM_LOCK_SPAN),
    ]


@contextlib.contextmanager
def claim_databases(paths: Sequence[str]) -> Iterator[None]:
    """Hold every database file in ``paths`` (and its ``-shm``) so that no other process
    has or can take it open, for the duration of the block. Files that do not exist are
    skipped (nothing can have them open).

    Raises DatabaseInUse when another process has one open; StorageReadOnly /
    StorageUnavailable when a file cannot be opened for locking (the check cannot be
    made, so the caller must not go on).
    """
    if fcntl is None:  # pragma: no cover - Windows
        raise StorageUnavailable("cannot check whether the database is in use on this platform")
    fds: list[int] = []
    try:
        for db_path in paths:
            for path, start, length in _targets(db_path):
                fd = _open_existing(path)
                if fd is None:
                    continue
                fds.append(fd)
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, length, start, os.SEEK_SET)
                except OSError as exc:
                    if exc.errno in _IN_USE_ERRNOS:
                        raise DatabaseInUse(_holder(fd, start, length)) from None
                    raise StorageUnavailable("cannot lock the database file") from None
        yield
    finally:
        for fd in fds:  # closing a descriptor releases its locks
            os.close(fd)


def database_in_use(path: str) -> bool:
    """Whether another process has the database file ``path`` open (the checks and limits
    of :func:`claim_databases`, which raises what this raises besides DatabaseInUse)."""
    try:
        with claim_databases([path]):
            return False
    except DatabaseInUse:
        return True


def _open_existing(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.EROFS:
            raise StorageReadOnly("database file is on a read-only filesystem") from None
        raise StorageUnavailable("cannot open the database file to check who uses it") from None


def _holder(fd: int, start: int, length: int) -> int | None:
    """The pid holding a lock in the range (``F_GETLK``), where ``struct flock`` is known."""
    if fcntl is None or not sys.platform.startswith("linux"):
        return None
    # struct flock on Linux: short l_type, l_whence; off_t l_start, l_len; pid_t l_pid.
    layout = "@hhqqi"
    try:
        query = struct.pack(layout, fcntl.F_WRLCK, os.SEEK_SET, start, length, 0)
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
        l_type, _, _, _, pid = struct.unpack(layout, answer)
    except (OSError, struct.error):
        return None
    return int(pid) if l_type != fcntl.F_UNLCK and pid > 0 else None
