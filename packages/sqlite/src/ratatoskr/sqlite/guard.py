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

**A process started later compares with the files found at the start.** What a
Database records at open is what the path names *then*: a server's worker that
starts after the ``-wal`` was replaced (a replacement for one that died) would
take the new file for its own and acknowledge writes into it, beside a sibling
that still has the old one open under the same ``-shm``. So a server's parent
holds each file open while it serves (:class:`HeldFiles`: a bare connection that
ran one read, so SQLite never removes the ``-wal``/``-shm`` between worker
generations, and that never holds a snapshot or blocks a checkpoint) and hands
their identities (:class:`FileSet`) to every worker it starts, which calls
:func:`expect_files` before opening anything: each Database of that file then
compares against those too, from the first write after its set-up.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import apsw

from ratatoskr.sqlite.errors import StorageError, StorageFull, StorageUnavailable
from ratatoskr.sqlite.files import file_identity, open_existing

__all__ = [
    "WAL_SIDECARS",
    "FileGuard",
    "FileSet",
    "HeldFiles",
    "below_reserve",
    "expect_files",
    "expected_files",
    "free_bytes",
    "start_files",
]

# The files SQLite keeps beside a database in WAL mode, checked like the database.
WAL_SIDECARS = ("-wal", "-shm")
RESERVE_MESSAGE = "free disk space is below the reserve: writes that add data are refused"


Identity = tuple[int, int]


@dataclass(frozen=True)
class FileSet:
    """Device and inode of a database file and of its ``-wal`` and ``-shm`` (None: absent)."""

    main: Identity | None
    sidecars: tuple[Identity | None, ...]

    @classmethod
    def of(cls, path: str) -> FileSet:
        """What ``path`` and its sidecars (beside the file a symlink names) name now."""
        real = os.path.realpath(path)
        return cls(file_identity(path), tuple(file_identity(real + s) for s in WAL_SIDECARS))


# The files this process must find at each path (as configured, and its real path):
# set by expect_files.
_expected: dict[str, FileSet] = {}


def expect_files(files: Mapping[str, FileSet]) -> None:
    """Make every Database this process opens on one of these paths compare its files
    with the given identities (what a server's parent held at start: :class:`HeldFiles`)
    as well as with the ones it opened. Call before opening them."""
    _expected.update({os.path.abspath(path): found for path, found in files.items()})


def expected_files(path: str) -> FileSet | None:
    """What :func:`expect_files` said ``path`` must be, or None (nothing said): by the
    path as configured first, so a symlink retargeted before this process opened it
    still finds what the server held at its start (and the guard refuses the new file)."""
    return _expected.get(os.path.abspath(path)) or _expected.get(os.path.realpath(path))


def start_files(path: str) -> FileSet:
    """The files that count as ``path``'s own in this process: the expected ones, else
    what is there now (what ``/readyz`` compares with)."""
    return expected_files(path) or FileSet.of(path)


class HeldFiles:
    """One bare connection to each database file, kept open by a server's parent while
    its workers come and go, with the identities of each file and its sidecars.

    SQLite removes ``-wal`` and ``-shm`` when the last connection to the file closes;
    while this one is open it never does, so the files every worker must use are the
    ones recorded here. The connection ran one read (a WAL connection holds its locks
    and the WAL index from its first statement) and holds no transaction: it keeps
    no snapshot a checkpoint would wait for, TRUNCATE included. Open it while the
    stores that created the files are still open (the files exist, and stay).
    Raises StorageError subclasses (nothing stays open then).
    """

    def __init__(self, paths: Iterable[str]) -> None:
        self._conns: list[apsw.Connection] = []
        self.files: dict[str, FileSet] = {}
        try:
            for path in paths:
                self.add(path)
        except BaseException:
            self.close()
            raise

    def add(self, path: str) -> None:
        """Hold ``path`` too (once, however often named). Raises StorageError subclasses
        (nothing more is held then)."""
        real = os.path.realpath(path)
        if real not in self.files:
            self._conns.append(open_existing(real, load_vec=False))
            self.files[real] = FileSet.of(real)
        # Keyed by the configured path too (a worker looks that up first).
        self.files.setdefault(os.path.abspath(path), self.files[real])

    def close(self) -> None:
        """Close every connection (the last one to a file removes its sidecars)."""
        conns, self._conns = self._conns, []
        for conn in conns:
            with contextlib.suppress(StorageError, apsw.Error):
                conn.close()


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
        # The path as configured names the file (a symlink retargeted is a replacement);
        # SQLite keeps its -wal/-shm beside the file it resolved, so the sidecars and the
        # disk that fills are the real path's.
        self.path = os.path.abspath(path)
        self.real = os.path.realpath(path)
        self.directory = os.path.dirname(self.real)
        self.reserve_bytes = reserve_bytes
        self._main = file_identity(self.path)
        self._sidecars: tuple[Identity | None, ...] | None = None
        # What this process must find at the path besides (see expect_files).
        self._expected: FileSet | None = None

    def expect(self) -> None:
        """From now on compare with the files :func:`expect_files` named for this path
        too (nothing changes when it named none). A Database calls it once set up."""
        self._expected = expected_files(self.path)

    def check_main(self) -> None:
        """Raise StorageUnavailable when the path no longer names the file opened (or
        the one expected)."""
        found = file_identity(self.path)
        if found != self._main or (self._expected is not None and found != self._expected.main):
            raise StorageUnavailable("database file was removed or replaced while open")

    def begin(self, conn: apsw.Connection) -> tuple[int, int] | None:
        """Call after ``BEGIN IMMEDIATE``: records the ``-wal``/``-shm`` identities at the
        first write; returns the file's page figures when the disk is below the reserve
        (what :meth:`before_commit` compares), else None."""
        if self._sidecars is None:
            self._sidecars = tuple(file_identity(self.real + s) for s in WAL_SIDECARS)
        if below_reserve(self.directory, self.reserve_bytes):
            return _used_pages(conn)
        return None

    def check_opened(self) -> None:
        """Raise StorageUnavailable when the files this database opened are not the
        expected ones (a worker started after a swap): a checkpoint through them would
        copy pages from a WAL that is not the server's into the file."""
        expected = self._expected
        if expected is None:
            return
        if self._main != expected.main:
            raise StorageUnavailable("database file was removed or replaced while open")
        for suffix, opened, wanted in zip(
            WAL_SIDECARS, self._sidecars or expected.sidecars, expected.sidecars, strict=True
        ):
            if wanted is not None and opened != wanted:
                raise StorageUnavailable(
                    f"database {suffix} file was removed or replaced while open"
                )

    def check_files(self) -> None:
        """Raise StorageUnavailable when the file, its ``-wal`` or its ``-shm`` is not the
        one this database has open (removed or replaced)."""
        self.check_main()
        if self._sidecars is None:
            return
        expected = self._expected.sidecars if self._expected is not None else self._sidecars
        for suffix, recorded, wanted in zip(WAL_SIDECARS, self._sidecars, expected, strict=True):
            # A file that was not there at the first write is not checked (no WAL mode).
            found = file_identity(self.real + suffix)
            if (recorded is not None and found != recorded) or (
                wanted is not None and found != wanted
            ):
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
