"""The temporary full copies a backup or a restore writes, and what a killed run left.

A backup writes its copy beside the destination and a restore beside the live file
(the rename that publishes either must stay on one filesystem to be atomic), so a
SIGKILL between the copy and the rename used to leave a hidden full copy of the
data there — holding, too, whatever was erased afterwards. Each temporary is now

- named recognisably: ``.<file>.<8 random>.ratatoskr-<purpose>`` (``partial`` for a
  backup, ``restoring`` for a restore; the restore's parked sidecars add
  ``.old-wal`` and the like);
- held by its writer under an exclusive ``flock`` for as long as it runs, which the
  kernel drops when the process dies, however it dies;
- removed when the run fails, and otherwise published by a rename;
- and removed by :func:`remove_stale_temps` — on the next backup or restore in that
  directory, and on the next open of any database there (a provider's start) —
  once no process holds it.

A restore killed after it parked the live file's ``-wal``/``-shm`` but before its
rename leaves the live file without them: the clean-up puts them back (the
restore's copy still being there proves the rename did not happen) before
anything opens the file.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
from collections.abc import Iterator

from ratatoskr.sqlite.errors import StorageUnavailable

__all__ = ["PARKED_SUFFIXES", "held_temp", "parked_name", "remove_stale_temps"]

_MARK = "ratatoskr-"
# A parked sidecar of the live file, beside the restore's copy: ``<temp>.old-wal``.
PARKED_SUFFIXES = (".old-wal", ".old-shm", ".old-journal")
# Ours (``.ratatoskr-partial``) and the names earlier releases used (``.partial``), with
# the files SQLite or a restore put beside them. mkstemp's 8 characters: [a-z0-9_].
_TEMP = re.compile(
    r"^(?P<main>\.(?P<base>.+)\.[a-z0-9_]{8}\.(?:ratatoskr-)?(?:partial|restoring))"
    r"(?P<extra>\.old-wal|\.old-shm|\.old-journal|-wal|-shm|-journal)?$"
)


def parked_name(temp: str, suffix: str) -> str:
    """Where a restore parks the live file's sidecar ``suffix`` (``-wal``) beside ``temp``."""
    return f"{temp}.old{suffix}"


@contextlib.contextmanager
def held_temp(beside: str, purpose: str) -> Iterator[str]:
    """An empty owner-only (0600) file in the directory of ``beside``, named after it,
    held under an exclusive lock for the block and removed (with its sidecars and
    parked files) when the block ends and it is still there — on success the caller
    has renamed it into place.

    Raises StorageUnavailable when the directory is missing or not writable.
    """
    parent = os.path.dirname(os.path.abspath(beside))
    if not os.path.isdir(parent):
        raise StorageUnavailable("directory does not exist")
    try:
        fd, path = tempfile.mkstemp(
            dir=parent, prefix=f".{os.path.basename(beside)}.", suffix=f".{_MARK}{purpose}"
        )
    except OSError:
        raise StorageUnavailable("cannot create a file in the directory") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield path
    finally:
        try:
            _remove_group(path)
        finally:
            os.close(fd)  # the lock goes with it


def _remove_group(main: str) -> None:
    for name in (main, *(main + s for s in ("-wal", "-shm", "-journal"))):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)
    for suffix in PARKED_SUFFIXES:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(main + suffix)


def remove_stale_temps(directory: str) -> list[str]:
    """Remove what killed backups and restores left in ``directory`` (see the module
    docstring); a temporary whose writer still runs is left alone. Returns the names
    removed. Never raises for a file that cannot be removed (the next run retries)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    groups: dict[str, list[str]] = {}
    for name in names:
        match = _TEMP.match(name)
        if match:
            groups.setdefault(match["main"], []).append(name)
    removed: list[str] = []
    for main, members in groups.items():
        path = os.path.join(directory, main)
        if main in members:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # its writer is running
                base = _TEMP.match(main)
                assert base is not None
                _put_back_parked(path, os.path.join(directory, base["base"]))
                before = set(os.listdir(directory))
                _remove_group(path)
                removed += sorted(before - set(os.listdir(directory)))
            except OSError:
                continue
            finally:
                os.close(fd)
        else:
            # The copy was renamed into place (or removed): what is left is stale.
            for name in members:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(directory, name))
                    removed.append(name)
    return removed


def _put_back_parked(temp: str, live: str) -> None:
    """A restore killed between parking the live file's sidecars and its rename: they
    belong to the live file still, unless something recreated them since."""
    for suffix in ("-wal", "-shm", "-journal"):
        parked = parked_name(temp, suffix)
        if os.path.lexists(parked) and not os.path.lexists(live + suffix):
            with contextlib.suppress(OSError):
                os.replace(parked, live + suffix)
