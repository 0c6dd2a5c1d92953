"""Online backup, verification and restore of one plane's database file.

**Backup is ``VACUUM INTO``**, not the online backup API stepped page by page.
Measured on this machine against a memory file of 10k chunks (384 dims, ~60 MB)
with a writer committing one chunk per call throughout:

- the backup API stepped (256 or 4096 pages a step) *never finished*: every
  commit by another connection restarts it (and the pages left grew). Only one
  ``step(-1)`` completes, and that holds one read snapshot for the whole copy —
  exactly what ``VACUUM INTO`` does;
- both then take about as long and delay the writer alike (docs/decisions.md;
  WAL mode never blocks it on a lock), and the WAL grows by what is written
  during the copy (it cannot be reset past the snapshot) and shrinks after;
- but after deleting half the chunks the API's copy was 55 MB with the deleted
  chunks' text still readable in its free pages, while ``VACUUM INTO`` wrote
  29 MB holding none of it: it rebuilds every table, so neither free pages nor
  what was deleted travel into a backup of what agents remember about people.

A snapshot taken when the backup starts holds every commit before it, and a
write is acknowledged only after its commit (``synchronous=FULL``), so every
write acknowledged before the backup began is in the copy. The copy is written
to an owner-only temporary file beside the destination, fsynced (SQLite does
not sync a ``VACUUM INTO`` file), verified, and only then renamed into place.
The temporaries of both commands are :mod:`ratatoskr.sqlite.temps`' (named
``….ratatoskr-partial`` / ``….ratatoskr-restoring``, locked while in use); each
run first removes what killed runs left in its directory.

**Restore** copies the backup beside the target, verifies that copy, then — while
holding the target so no process can have it open (``inuse.claim_databases``) —
moves the target's stale ``-wal``/``-shm``/``-journal`` aside (a stale WAL would be
replayed into the new file), renames the copy over the target and only then
removes them. Any failure before the rename leaves the target as it was.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import apsw

from ratatoskr.sqlite.database import MetaSetting
from ratatoskr.sqlite.driver import translate_errors
from ratatoskr.sqlite.errors import StorageCorrupt, StorageError, StorageUnavailable
from ratatoskr.sqlite.files import (
    SIDECAR_SUFFIXES,
    fsync_directory,
    fsync_file,
    open_existing,
)
from ratatoskr.sqlite.inuse import claim_databases
from ratatoskr.sqlite.migrations import read_meta, recorded_planes, schema_version
from ratatoskr.sqlite.temps import held_temp, parked_name, remove_stale_temps

__all__ = [
    "BackupResult",
    "InvalidBackup",
    "PlaneFile",
    "RestoreResult",
    "backup_database",
    "restore_database",
    "verify_plane_file",
]


class InvalidBackup(StorageError):
    """A file is not a sound copy of the plane: damaged, another plane's, made with other
    fixed settings, or newer than this release."""


@dataclass(frozen=True)
class PlaneFile:
    """What a sound file of ``plane`` looks like to this release.

    ``schema_version`` is the newest version this release knows; ``meta`` the fixed
    settings the file must have been created with (``MetaSetting.setting`` names the
    setting in messages).
    """

    plane: str
    schema_version: int
    meta: Mapping[str, MetaSetting] = field(default_factory=dict)


@dataclass(frozen=True)
class BackupResult:
    path: str
    bytes: int
    seconds: float
    schema_version: int


@dataclass(frozen=True)
class RestoreResult:
    path: str
    bytes: int
    schema_version: int
    # Whether a database was there before (and was replaced).
    replaced: bool


def verify_plane_file(path: str, expected: PlaneFile) -> int:
    """Check ``path`` is a whole, sound file of ``expected.plane``: SQLite's full
    integrity check, the plane's migrations and no other plane's, a schema version this
    release knows, and each fixed setting. Returns the file's schema version.

    Opens ``path`` read-write when allowed (pass only files of your own). Raises
    InvalidBackup saying what is wrong (no content, no path), or StorageUnavailable.
    """
    try:
        conn = open_existing(path)
    except StorageCorrupt:
        raise InvalidBackup("is not a SQLite database, or is damaged") from None
    try:
        with translate_errors():
            rows = conn.execute("PRAGMA integrity_check").fetchall()
            if rows != [("ok",)]:
                raise InvalidBackup("fails SQLite's integrity check")
            planes = recorded_planes(conn)
            if expected.plane not in planes:
                if not planes:
                    raise InvalidBackup("holds no ratatoskr plane")
                raise InvalidBackup(f"holds the {planes[0]} plane, not {expected.plane}")
            others = [p for p in planes if p != expected.plane]
            if others:
                raise InvalidBackup(f"holds the {others[0]} plane besides {expected.plane}")
            version = schema_version(conn, expected.plane)
            if version > expected.schema_version:
                raise InvalidBackup(
                    f"has {expected.plane} schema version {version}, newer than this release "
                    f"knows ({expected.schema_version})"
                )
            for key, wanted in expected.meta.items():
                stored = read_meta(conn, key)
                if stored is None:
                    raise InvalidBackup(f"records no {key}")
                if stored != wanted.value:
                    raise InvalidBackup(
                        f"was made with {key}={stored}, but {wanted.setting}={wanted.value}"
                    )
            return version
    except StorageCorrupt:
        raise InvalidBackup("is not a SQLite database, or is damaged") from None
    finally:
        conn.close()


def backup_database(
    source: str, dest: str, expected: PlaneFile, *, overwrite: bool = False
) -> BackupResult:
    """Copy the live database ``source`` to ``dest`` (owner-only), consistently while
    other processes read and write it, and verify the copy before it appears at ``dest``.

    Raises StorageUnavailable (no source, no destination directory, ``dest`` exists and
    not ``overwrite``), InvalidBackup (the source or its copy is not a sound file of the
    plane), or another StorageError (a full disk); on any error ``dest`` is as it was.
    """
    started = time.monotonic()
    if os.path.lexists(dest) and not overwrite:
        raise StorageUnavailable("destination exists")
    if os.path.isdir(dest):
        raise StorageUnavailable("destination is a directory")
    remove_stale_temps(os.path.dirname(os.path.abspath(dest)))
    conn = open_existing(source)
    try:
        with held_temp(dest, "partial") as tmp:
            with translate_errors():
                before = _source_version(conn, expected)
                # The INTO file may exist if it is empty: ours is, and already 0600.
                conn.execute("VACUUM INTO ?", (os.path.abspath(tmp),))
            conn.close()
            fsync_file(tmp)
            version = verify_plane_file(tmp, expected)
            if version != before:
                raise InvalidBackup("changed its schema version during the copy")
            _remove_sidecars(tmp)
            size = os.path.getsize(tmp)
            os.replace(tmp, dest)
            fsync_directory(dest)
    finally:
        conn.close()
    return BackupResult(dest, size, time.monotonic() - started, version)


def _source_version(conn: apsw.Connection, expected: PlaneFile) -> int:
    """The source's schema version; refuses a source of another plane before copying."""
    planes = recorded_planes(conn)
    if expected.plane not in planes:
        raise InvalidBackup(
            f"holds the {planes[0]} plane, not {expected.plane}"
            if planes
            else "holds no ratatoskr plane"
        )
    return schema_version(conn, expected.plane)


def restore_database(
    backup: str, target: str, expected: PlaneFile, *, also_claim: Sequence[str] = ()
) -> RestoreResult:
    """Replace ``target`` (or create it) with a verified, owner-only copy of ``backup``.

    Refused — with ``target`` left untouched — when ``backup`` is not a sound file of
    the plane, when it has a WAL or journal beside it (a live database, not a backup),
    or when another process has ``target`` (or a file of ``also_claim``, such as its
    replay cache) open. ``backup`` itself is only read, never opened by SQLite.

    Raises InvalidBackup, DatabaseInUse, StorageUnavailable or another StorageError.
    """
    if not os.path.isfile(backup):
        raise StorageUnavailable("backup file does not exist")
    if any(os.path.exists(backup + s) for s in ("-wal", "-journal")):
        raise InvalidBackup(
            "has a -wal or -journal file beside it: a live database, not a backup "
            "(take one with `ratatoskr backup`)"
        )
    if os.path.exists(target) and os.path.samefile(backup, target):
        raise InvalidBackup("is the target database itself")
    remove_stale_temps(os.path.dirname(os.path.abspath(target)))
    with held_temp(target, "restoring") as tmp:
        _copy_bytes(backup, tmp)
        version = verify_plane_file(tmp, expected)
        _remove_sidecars(tmp)
        _keep_owner(target, tmp)
        fsync_file(tmp)
        size = os.path.getsize(tmp)
        replaced = os.path.exists(target)
        with claim_databases([target, *also_claim]):
            _replace(tmp, target)
    return RestoreResult(target, size, version, replaced)


def _copy_bytes(source: str, dest: str) -> None:
    try:
        with open(source, "rb") as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        raise StorageUnavailable(f"cannot copy the backup ({exc.strerror})") from None


def _replace(tmp: str, target: str) -> None:
    """Rename ``tmp`` over ``target``, its stale sidecar files moved aside first and put
    back if the rename fails (the caller holds ``target`` so nobody opens it meanwhile)."""
    aside: list[tuple[str, str]] = []
    try:
        for suffix in SIDECAR_SUFFIXES:
            name = target + suffix
            if os.path.lexists(name):
                parked = parked_name(tmp, suffix)
                os.replace(name, parked)
                aside.append((parked, name))
        os.replace(tmp, target)
    except BaseException:
        for parked, name in reversed(aside):
            with contextlib.suppress(OSError):
                os.replace(parked, name)
        raise
    fsync_directory(target)
    for parked, _ in aside:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(parked)


def _keep_owner(target: str, tmp: str) -> None:
    """Run as root, give the new file the old one's owner: the provider runs as that user
    and could not open a root-owned 0600 file."""
    if os.geteuid() != 0 or not os.path.exists(target):
        return
    st = os.stat(target)
    os.chown(tmp, st.st_uid, st.st_gid)


def _remove_sidecars(path: str) -> None:
    for suffix in SIDECAR_SUFFIXES:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path + suffix)
