"""``forget`` on PostgreSQL: the rows of a scope deleted in bounded transactions.

The rows whose scope columns hold every given axis are deleted ``batch`` at a
time, each batch its own transaction (other tenants' writes wait for one batch at
most: a delete locks only the rows it removes), until a batch finds fewer. What
a delete leaves: the rows become dead tuples, their bytes still in the table's
and indexes' pages (and in the WAL segments until they are recycled) until
VACUUM makes the space reusable and later writes overwrite it; ``VACUUM FULL``
rewrites the table into new files and drops the old ones. docs/privacy.md gives
the measurements.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from psycopg import Cursor, sql

from ratatoskr.postgres.database import PostgresDatabase
from ratatoskr.postgres.scope import conjunction_sql, filter_params

FORGET_BATCH = 500


def forget_rows(
    db: PostgresDatabase,
    table: str,
    key: str,
    axes: Mapping[str, str],
    *,
    dry_run: bool = False,
    batch: int = FORGET_BATCH,
    then: Callable[[Cursor[Any], list[str]], None] | None = None,
) -> int:
    """Delete (``dry_run``: count) the rows of ``table`` whose scope contains ``axes``,
    ``batch`` per transaction; ``then(cur, keys)`` runs in each batch's transaction
    with the ``key`` column of the rows it deleted. Returns the count.

    Raises ValueError for empty ``axes`` and StorageError subclasses."""
    if not axes:
        raise ValueError("forget needs at least one scope axis")
    t = db.table(table)
    cond, _ = conjunction_sql(dict(axes))
    params = filter_params([dict(axes)])
    if dry_run:
        count_sql = sql.SQL("SELECT count(*) FROM {t} WHERE {c}").format(t=t, c=cond)

        def count(cur: Cursor[Any]) -> int:
            cur.execute(count_sql, params)
            row = cur.fetchone()
            return int(row[0]) if row else 0

        return db.run(count)
    delete_sql = sql.SQL(
        "DELETE FROM {t} WHERE {k} IN (SELECT {k} FROM {t} WHERE {c} ORDER BY {k} LIMIT %s"
        " FOR UPDATE) RETURNING {k}"
    ).format(t=t, k=sql.Identifier(key), c=cond)

    def step(cur: Cursor[Any]) -> int:
        cur.execute(delete_sql, [*params, batch])
        keys = [str(r[0]) for r in cur.fetchall()]
        if keys and then is not None:
            then(cur, keys)
        return len(keys)

    total = 0
    while True:
        n = db.run(step, mode="write")
        total += n
        if n < batch:
            return total
