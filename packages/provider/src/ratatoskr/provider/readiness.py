"""``GET /readyz``: whether every plane this process serves can read and write its files.

A read through an open connection proves little on its own: SQLite keeps
reading a file that was deleted, replaced or made unreadable after it was
opened (and ``/healthz`` touches nothing at all). So for each plane the probe
checks that the configured path still names the file that was opened (device
and inode, recorded when the app was built — the check the stores make before
every write), that it is readable and writable, then reads through the plane's
own store (what its entry in ``registry.PLANE_TABLE`` reads: the file's schema
version, a round trip to PostgreSQL, VMP's counters) and asks its token cache
whether it has seen a token (``seen()``, a read of that file, whose path is
checked the same way). The ``-wal`` and ``-shm`` beside each file are checked
like the file (a write is refused when either was removed or replaced, so the
plane is not ready then), and a filesystem with less free space than
``RATATOSKR_DISK_RESERVE_BYTES`` makes its planes "disk full": writes that add
data answer 507 until space returns (reads and deletes go on). On PostgreSQL the
read also asks whether a commit can be acknowledged now: with fewer synchronous
standbys connected than the server requires, every write waits for one (and
answers 503 after ``RATATOSKR_POSTGRES_SYNC_WAIT_S``), so the plane is not ready
and says why. The answer names each plane with ``ready`` or what failed — never
a path, a count or anything stored.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bifrost.auth import TokenCache
from ratatoskr.provider.preflight import OpenPlanes
from ratatoskr.provider.settings import Plane, Settings, is_dsn
from ratatoskr.sqlite import MEMORY_PATH, SqliteTokenCache
from ratatoskr.sqlite.files import file_identity
from ratatoskr.sqlite.guard import WAL_SIDECARS, below_reserve, start_files
from ratatoskr.storage.errors import CommitsBlocked

__all__ = ["READY", "PlaneProbe", "plane_probes", "probe_all"]

_log = logging.getLogger("ratatoskr.readyz")
READY = "ready"
DISK_FULL = "disk full: free space below RATATOSKR_DISK_RESERVE_BYTES; writes that add data refused"
# A jti no token carries (ours are random hex or UUIDs); only ever looked up.
_PROBE_JTI = "ratatoskr-readyz-probe"


@dataclass
class _File:
    what: str
    path: str
    identity: tuple[int, int] | None


@dataclass
class PlaneProbe:
    """What ``/readyz`` checks for one plane."""

    plane: str
    read: Callable[[], object]
    files: list[_File] = field(default_factory=list)
    replay: TokenCache | None = None
    # Free bytes the plane's filesystem must keep (0: none; see ratatoskr.sqlite.guard).
    reserve_bytes: int = 0

    def check(self) -> str:
        """``READY``, or a short content-free reason naming the part that failed."""
        for f in self.files:
            if file_identity(f.path) != f.identity or f.identity is None:
                return f"{f.what} file missing or replaced"
            if not os.access(f.path, os.R_OK | os.W_OK):
                return f"{f.what} file not readable and writable"
        if any(below_reserve(os.path.dirname(f.path), self.reserve_bytes) for f in self.files):
            return DISK_FULL
        try:
            self.read()
        except CommitsBlocked as exc:  # PostgreSQL: a synchronous standby is missing
            return exc.message
        except Exception as exc:  # any failure of the read is the finding
            _log.warning("readyz: %s database read failed (%s)", self.plane, type(exc).__name__)
            return "database read failed"
        if self.replay is not None:
            try:
                self.replay.seen(_PROBE_JTI, time.time())
            except Exception as exc:  # likewise
                _log.warning("readyz: %s replay cache failed (%s)", self.plane, type(exc).__name__)
                return "replay cache read failed"
        return READY


def plane_probes(
    settings: Settings, planes: tuple[Plane, ...], opened: OpenPlanes
) -> list[PlaneProbe]:
    """One probe per served plane; records each file's identity now (call it right
    after the stores are opened)."""
    probes = []
    for plane in planes:
        served = opened.served.get(plane)
        if served is None:
            continue
        probe = PlaneProbe(plane, served.read, replay=served.replay)
        path = settings.db_path(plane)
        if path != MEMORY_PATH and not is_dsn(path):
            probe.files += _with_sidecars("database", os.path.abspath(path))
            probe.reserve_bytes = settings.disk_reserve_bytes
        if isinstance(probe.replay, SqliteTokenCache):
            probe.files += _with_sidecars("replay cache", probe.replay.path)
        probes.append(probe)
    return probes


def _with_sidecars(what: str, path: str) -> list[_File]:
    """The file and the WAL files SQLite has open beside it, each as it is now (or as
    the server found them at its start, in a worker: ratatoskr.sqlite.guard)."""
    start = start_files(path)
    files = [_File(what, path, start.main)]
    real = os.path.realpath(path)  # SQLite's -wal/-shm are beside the file a link names
    for suffix, identity in zip(WAL_SIDECARS, start.sidecars, strict=True):
        if identity is not None:  # none: not in WAL mode
            files.append(_File(f"{what} {suffix}", real + suffix, identity))
    return files


def probe_all(probes: list[PlaneProbe]) -> dict[str, str]:
    """Each plane's answer (blocking I/O: run it in a worker thread)."""
    answers = {p.plane: p.check() for p in probes}
    for plane, answer in answers.items():
        if answer != READY:
            _log.warning("readyz: %s not ready: %s", plane, answer)
    return answers
