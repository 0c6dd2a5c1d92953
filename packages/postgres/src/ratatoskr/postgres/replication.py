"""Whether the server a provider writes to waits for a standby before it acknowledges.

An acknowledged write survives the loss of the primary's machine only when it was
on a standby before the answer: ``synchronous_standby_names`` names at least one
standby, ``synchronous_commit`` is ``on`` (the standby has it on disk) or
``remote_apply`` (and visible there), and such a standby is connected (else every
commit waits for one). :func:`replication_status` reads the three;
:func:`check_synchronous_standby` is the provider's check at start: a warning, or
a refusal when the operator asked for one.

:func:`check_commits_complete` is ``/readyz``'s question: can a commit be
acknowledged right now? Not while fewer synchronous standbys are connected than
``synchronous_standby_names`` asks for (``FIRST n``/``ANY n``/``n (…)``, else 1):
every write then waits for one (and answers 503 after ``sync_wait``,
``ratatoskr.postgres.syncwait``).

``pg_stat_replication`` shows a standby's ``sync_state`` only to roles with
``pg_read_all_stats`` (``pg_monitor``); for other roles the count is unknown: the
start check rests on the configuration alone, and ``/readyz`` on whether this
process's last write timed out waiting for the standby.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from psycopg import Cursor

from ratatoskr.postgres.database import PoolRunner
from ratatoskr.storage.errors import CommitsBlocked, StorageUnavailable

__all__ = [
    "DURABLE_COMMITS",
    "STANDBY_NOT_CONNECTED",
    "CommitsBlocked",
    "ReplicationStatus",
    "check_commits_complete",
    "check_synchronous_standby",
    "replication_status",
    "required_standbys",
]

# The synchronous_commit levels at which a commit waits for the standby's disk (or more).
DURABLE_COMMITS = frozenset({"on", "remote_apply"})
# The levels at which a commit waits for the synchronous standby at all.
_WAITING_COMMITS = frozenset({"on", "remote_write", "remote_apply"})
# synchronous_standby_names: "FIRST 2 (a, b)", "ANY 2 (a, b)", "2 (a, b)"; else one of a list.
_NUM_SYNC = re.compile(r"\s*(?:(?:first|any)\s+)?(\d+)\s*\(", re.IGNORECASE)
STANDBY_NOT_CONNECTED = "synchronous standby not connected: writes cannot be acknowledged"
_LOG = logging.getLogger("ratatoskr.postgres")


def required_standbys(names: str) -> int:
    """How many synchronous standbys must confirm a commit under ``names``
    (``synchronous_standby_names``; 0 when it is empty)."""
    if not names.strip():
        return 0
    found = _NUM_SYNC.match(names)
    return int(found.group(1)) if found else 1


@dataclass(frozen=True)
class ReplicationStatus:
    """What the server says about synchronous replication, for this role's sessions."""

    synchronous_standby_names: str
    synchronous_commit: str
    # Standbys connected as sync or quorum; None when this role may not see them.
    synchronous_standbys: int | None

    @property
    def problem(self) -> str | None:
        """Why an acknowledged write could be lost with the primary's machine, or None."""
        if not self.synchronous_standby_names.strip():
            return "the database has no synchronous standby (synchronous_standby_names is empty)"
        if self.synchronous_commit not in DURABLE_COMMITS:
            return (
                f"synchronous_commit is {self.synchronous_commit}: a commit does not wait "
                "for the synchronous standby (use on or remote_apply)"
            )
        if self.missing_standbys:
            return "no synchronous standby is connected (commits wait until one is)"
        return None

    @property
    def missing_standbys(self) -> bool:
        """Whether commits wait for a standby that is not connected (False when this
        role cannot see the standbys)."""
        if self.synchronous_commit not in _WAITING_COMMITS or self.synchronous_standbys is None:
            return False
        return self.synchronous_standbys < required_standbys(self.synchronous_standby_names)


def replication_status(cur: Cursor[Any]) -> ReplicationStatus:
    """The settings of this session and the synchronous standbys connected."""
    names = cur.execute("SELECT current_setting('synchronous_standby_names')").fetchone()
    commit = cur.execute("SELECT current_setting('synchronous_commit')").fetchone()
    rows = cur.execute("SELECT sync_state FROM pg_stat_replication").fetchall()
    visible = all(r[0] is not None for r in rows)
    count = sum(1 for r in rows if r[0] in ("sync", "quorum")) if visible else None
    return ReplicationStatus(
        str(names[0]) if names else "", str(commit[0]) if commit else "", count
    )


def check_synchronous_standby(
    runner: PoolRunner, *, require: bool, what: str = "the database", hint: str = ""
) -> ReplicationStatus:
    """Read the status through ``runner``; when an acknowledged write could be lost
    with the primary, log a warning naming ``what`` — or, with ``require``, raise
    StorageUnavailable saying why. ``hint`` (how to refuse, or to stop refusing) is
    appended to either. No DSN and no content in either."""
    status = runner.run(replication_status)
    problem = status.problem
    if problem is None:
        return status
    tail = f" ({hint})" if hint else ""
    if require:
        raise StorageUnavailable(f"{problem}{tail}")
    _LOG.warning(
        "%s: %s; an acknowledged write is lost if the primary's machine is%s", what, problem, tail
    )
    return status


def check_commits_complete(runner: PoolRunner, *, wait: float = 1.0) -> ReplicationStatus:
    """Raise CommitsBlocked when a write through ``runner`` cannot be acknowledged now:
    fewer synchronous standbys are connected than the server asks for, or (when this
    role cannot see them) the runner's last write timed out waiting for one. Waits
    at most ``wait`` seconds for a connection; raises StorageError subclasses when
    the server cannot be read."""
    status = runner.run(replication_status, wait=wait)
    unseen = status.synchronous_standbys is None and runner.unconfirmed_since is not None
    if status.missing_standbys or (unseen and status.synchronous_commit in _WAITING_COMMITS):
        raise CommitsBlocked(STANDBY_NOT_CONNECTED)
    return status
