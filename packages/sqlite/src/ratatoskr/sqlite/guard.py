"""What every write transaction checks about the files under it, just before COMMIT.

**The files are still the ones opened.** SQLite keeps writing through its open
handles after a file was unlinked or replaced: a database file, and just as
well its ``-wal`` (where a commit actually lands until a checkpoint) or its
``-shm`` (the WAL index other processes read). With ``memory.db-wal`` unlinked
under a running provider, every later write was acknowledged and lost at the
next crash. So the device and inode of the main file, ``-wal`` and ``-shm`` are
recorded at the first write transaction (``BEGIN IMMEDIATE`` held: the files
exist, as this connection has the WAL open) and compared before every COMMIT;
a difference rolls the transaction back with StorageUnavailable. SQLite itself
removes ``-wal``/``-shm`` only when the *last* connection to the file closes
(and checkpoints under an exclusive lock an open connection prevents) and
never renames or recreates them otherwise (a checkpoint that truncates or a WAL
reset rewrites the same inode), so while a Database is open a change is
never SQLite's own doing. Three ``stat`` calls: microseconds.

**The disk keeps a reserve.** When the filesystem holding the file has less
than ``reserve_bytes`` free (``statvfs``), a write transaction that would
make the file larger — more pages than at BEGIN, and more pages in use — is
rolled back with StorageFull (a 507 on the wire). Deletes free pages, and a
rewrite of existing data reuses them, so both go on below the reserve; so do
the replay cache's token records, whose Database has no reserve. The WAL's
growth is what the reserve pays for. Nothing is remembered: the first write
after space returns succeeds.
"""

from __future__ import annotations

import os

import apsw

from ratatoskr.sqlite.errors import StorageFull, StorageUnavailable
from ratatoskr.sqlite.files import file_identity

__all__ = ["WAL_SIDECARS", "FileGuard", "below_reserve", "free_bytes"]

# The files SQLite keeps beside a database in WAL mode, checked like the database.
WAL_SIDECARS = ("-wal", "-shm")
RESERVE_MESSAGE = "free disk space is below the reserve: writes that add data are refused"


def free_bytes(directory: str) -> int:
    """Bytes an unprivileged writer may still use on the filesystem of ``directory``."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def below_reserve(directory: str, reserve_bytes: int) -> bool:
    """Whether the filesystem of ``directory`` has less than ``reserve_bytes`` free
    (never, for a reserve of 0; an unreadable filesystem counts as below)."""
    if reserve_bytes <= 0:
        return False
    try:
        return free_bytes(directory) < reserve_bytes
    except OSError:
        return True


def _used_pages(conn: apsw.Connection) -> tuple[int, int]:
    """(page_count, pages in use) as this transaction sees the file."""
    pages = int(conn.execute("PRAGMA page_count").fetchall()[0][0])  # type: ignore[arg-type]
    free = int(conn.execute("PRAGMA freelist_count").fetchall()[0][0])  # type: ignore[arg-type]
    return pages, pages - free


class FileGuard:
    """The checks of one open database file (not used for ``:memory:``)."""

    def __init__(self, path: str, *, reserve_bytes: int = 0) -> None:
        self.path = os.path.abspath(path)
        self.directory = os.path.dirname(self.path)
        self.reserve_bytes = reserve_bytes
        self._main = file_identity(self.path)
        self._sidecars: tuple[tuple[int, int] | None, ...] | None = None

    def check_main(self) -> None:
        """Raise StorageUnavailable when the path no longer names the file opened."""
        if file_identity(self.path) != self._main:
            raise StorageUnavailable("database file was removed or replaced while open")

    def begin(self, conn: apsw.Connection) -> tuple[int, int] | None:
        """Call after ``BEGIN IMMEDIATE``: records the ``-wal``/``-shm`` identities at the
        first write; returns the file's page figures when the disk is below the reserve
        (what :meth:`before_commit` compares), else None."""
        if self._sidecars is None:
            self._sidecars = tuple(file_identity(self.path + s) for s in WAL_SIDECARS)
        if below_reserve(self.directory, self.reserve_bytes):
            return _used_pages(conn)
        return None

    def check_files(self) -> None:
        """Raise StorageUnavailable when the file, its ``-wal`` or its ``-shm`` is not the
        one this database has open (removed or replaced)."""
        self.check_main()
        if self._sidecars is None:
            return
        for suffix, recorded in zip(WAL_SIDECARS, self._sidecars, strict=True):
            # A file that was not there at the first write is not checked (no WAL mode).
            if recorded is not None and file_identity(self.path + suffix) != recorded:
                raise StorageUnavailable(
                    f"database {suffix} file was removed or replaced while open"
                )

    def before_commit(self, conn: apsw.Connection, at_begin: tuple[int, int] | None) -> None:
        """Call just before COMMIT, the write lock held. Raises StorageUnavailable (a file
        removed or replaced) or StorageFull (the file would grow below the reserve)."""
        self.check_files()
        if at_begin is not None:
            self.check_growth(conn, at_begin)

    @staticmethod
    def pages(conn: apsw.Connection) -> tuple[int, int]:
        """The file's page figures as ``conn``'s transaction sees them now (what
        :meth:`check_growth` compares: a group commit marks each batch's start)."""
        return _used_pages(conn)

    @staticmethod
    def check_growth(conn: apsw.Connection, mark: tuple[int, int]) -> None:
        """Raise StorageFull when the file grew since ``mark`` (more pages, and more of
        them in use); call only when the disk is below the reserve."""
        pages, used = _used_pages(conn)
        if pages > mark[0] and used > mark[1]:
            raise StorageFull(RESERVE_MESSAGE)
