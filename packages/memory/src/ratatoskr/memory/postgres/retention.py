"""Retention on the PostgreSQL memory store (:mod:`ratatoskr.memory.retention` says
what expiry means; :mod:`bifrost.memory.retention` decides it).

Every statement of the store that reads chunks holds :data:`LIVE_SQL` (one parameter:
the cutoff, ``-Infinity`` when nothing expires) beside its scope, so a search's
``ORDER BY … LIMIT`` and a scan's keyset page are taken over live rows only: exact
with no second pass. The upsert turns an expired row it meets into revision 1 and
lets any grant write it (an expired chunk is absent); the sweep deletes expired rows
oldest first through the ``updated_at`` index (migration 4), ``SWEEP_BATCH`` per
transaction, skipping rows another transaction holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg import Cursor, sql

from ratatoskr.memory.retention import SWEEP_BATCH
from ratatoskr.postgres.database import PostgresDatabase

__all__ = ["LIVE_SQL", "cutoff_param", "sweep", "updated_at_index"]

# A live row under the cutoff parameter. Written so that no read can use the
# write-time index (the sweep's): with no retention the cutoff is -Infinity, and the
# planner took that index over the tenant's covering one (migration 5 puts the write
# time in it, so a tenant's search stays an index-only scan).
LIVE_SQL = sql.SQL("(updated_at + 0) >= %s")


def cutoff_param(cutoff: float | None) -> float:
    """The cutoff as the statements' parameter (nothing expires: ``-Infinity``)."""
    return float("-inf") if cutoff is None else cutoff


def updated_at_index(table: sql.Composable) -> Callable[[Cursor[Any]], None]:
    """The migration adding the write-time index of the chunks ``table``."""

    def create(cur: Cursor[Any]) -> None:
        cur.execute(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS memory_chunks_updated_at ON {t} (updated_at)"
            ).format(t=table)
        )

    return create


def sweep(
    db: PostgresDatabase,
    table: str,
    cutoff: Callable[[], float | None],
    *,
    limit: int | None = None,
    batch: int = SWEEP_BATCH,
) -> int:
    """Delete expired chunks, oldest first, ``batch`` per transaction (the cutoff read
    for each), until none is left or ``limit`` are deleted; how many."""
    t = db.table(table)
    statement = sql.SQL(
        "DELETE FROM {t} WHERE chunk_id IN (SELECT chunk_id FROM {t} WHERE updated_at < %s"
        " ORDER BY updated_at LIMIT %s FOR UPDATE SKIP LOCKED)"
    ).format(t=t)
    total = 0
    while limit is None or total < limit:
        at = cutoff()
        if at is None:
            return total
        size = batch if limit is None else min(batch, limit - total)

        def step(cur: Cursor[Any], at: float = at, size: int = size) -> int:
            cur.execute(statement, (at, size))
            return cur.rowcount

        n = db.run(step, mode="write")
        total += n
        if n < size:
            break
    return total
