"""The change log another process's in-memory index catches up from.

Every write that changes chunks advances the change counter (``memory_counters``
``seq``) by one and stamps the rows it wrote with it; a delete leaves a tombstone
``(chunk_id, seq)``. An index built to ``seq = s`` catches up by applying the rows
and tombstones stamped after ``s``.

Tombstones are pruned by the writes themselves, below a **retention horizon**:
each write drops at most ``PRUNE_PER_WRITE`` plus as many as it adds of the
tombstones older than the last ``retention`` counter values (oldest first, a range
read of the ``seq`` index), and records in ``memory_counters`` that the log is
complete only after ``tombstones_pruned_through`` (every tombstone stamped later
is kept). An index older than that horizon cannot tell which of its rows were
deleted, so it reloads from the database instead of catching up: correctness
over speed, for a process that fell that far behind.
"""

from __future__ import annotations

from collections.abc import Sequence

import apsw

# Tombstones are kept for the last this many change-counter values (writes that
# changed chunks). A process whose index is further behind reloads it (~2 s at 100k
# chunks × 384); one that is closer catches up from the tombstones.
DEFAULT_TOMBSTONE_RETENTION = 10_000
# Old tombstones a write may drop beyond the ones it adds: a delete of n ids drops up
# to 64 + n, so the backlog of an upgraded file drains and the table never outgrows
# the retention window, and no write pays for the whole backlog at once.
PRUNE_PER_WRITE = 64

SEQ = "seq"
HORIZON = "tombstones_pruned_through"
# The change counter as a scalar subquery (NULL before the first write: read as 0),
# for a statement that reads it in the same snapshot as the rows it returns.
SEQ_SQL = f"(SELECT value FROM memory_counters WHERE name = '{SEQ}')"


def _counter(conn: apsw.Connection, name: str) -> int:
    rows = conn.execute("SELECT value FROM memory_counters WHERE name = ?", (name,)).fetchall()
    return int(rows[0][0]) if rows else 0  # type: ignore[arg-type]


def seq(conn: apsw.Connection) -> int:
    """The change counter in ``conn``'s snapshot."""
    return _counter(conn, SEQ)


def set_seq(conn: apsw.Connection, value: int) -> None:
    conn.execute("UPDATE memory_counters SET value = ? WHERE name = ?", (value, SEQ))


def horizon(conn: apsw.Connection) -> int:
    """The newest change-counter value whose tombstones may have been pruned (0: none
    ever were); every tombstone stamped after it is still there."""
    return _counter(conn, HORIZON)


def bury(conn: apsw.Connection, ids: Sequence[str], at: int) -> None:
    """Tombstones for ``ids`` deleted by the write stamped ``at``."""
    conn.executemany(
        "INSERT OR REPLACE INTO memory_tombstones (chunk_id, seq) VALUES (?, ?)",
        [(chunk_id, at) for chunk_id in ids],
    )


def unbury(conn: apsw.Connection, ids: Sequence[str]) -> None:
    """Drop the tombstones of ``ids`` written again (their rows carry the newer stamp)."""
    conn.executemany("DELETE FROM memory_tombstones WHERE chunk_id = ?", [(i,) for i in ids])


def prune(conn: apsw.Connection, *, at: int, retention: int, limit: int) -> int:
    """Drop up to ``limit`` tombstones stamped ``at - retention`` or earlier, oldest
    first, and move the horizon up to the newest one dropped. Returns how many went."""
    floor = at - retention
    if floor < 1 or limit < 1:
        return 0
    dropped = conn.execute(
        "DELETE FROM memory_tombstones WHERE chunk_id IN ("
        " SELECT chunk_id FROM memory_tombstones WHERE seq <= ? ORDER BY seq LIMIT ?)"
        " RETURNING seq",
        (floor, limit),
    ).fetchall()
    if not dropped:
        return 0
    newest = max(int(row[0]) for row in dropped)  # type: ignore[arg-type]
    conn.execute(
        "UPDATE memory_counters SET value = max(value, ?) WHERE name = ?", (newest, HORIZON)
    )
    return len(dropped)
