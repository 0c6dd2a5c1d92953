"""Whether the server a provider writes to waits for a standby before it acknowledges.

An acknowledged write survives the loss of the primary's machine only when it was
on a standby before the answer: ``synchronous_standby_names`` names at least one
standby, ``synchronous_commit`` is ``on`` (the standby has it on disk) or
``remote_apply`` (and visible there), and such a standby is connected (else every
commit waits for one). :func:`replication_status` reads the three;
:func:`check_synchronous_standby` is the provider's check at start: a warning, or
a refusal when the operator asked for one.

``pg_stat_replication`` shows a standby's ``sync_state`` only to roles with
``pg_read_all_stats`` (``pg_monitor``); for other roles the count is unknown and
the check rests on the configuration alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from psycopg import Cursor

from ratatoskr.postgres.database import PoolRunner
from ratatoskr.storage.errors import StorageUnavailable

__all__ = [
    "DURABLE_COMMITS",
    "ReplicationStatus",
    "check_synchronous_standby",
    "replication_status",
]

# The synchronous_commit levels at which a commit waits for the standby's disk (or more).
DURABLE_COMMITS = frozenset({"on", "remote_apply"})
_LOG = logging.getLogger("ratatoskr.postgres")


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
        if self.synchronous_standbys == 0:
            return "no synchronous standby is connected (commits wait until one is)"
        return None


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
