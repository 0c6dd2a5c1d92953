"""Erasure on PostgreSQL: ``delete_many``'s grant decided on locked rows, and
``forget``, the rows of a scope deleted in bounded transactions.

A store's ``delete_many`` first locks the rows of its ids (:func:`locked_scopes_sql`,
``SELECT … ORDER BY key FOR UPDATE``: the key order writers lock rows in) and reads
their scope columns; bifrost's ``deletable`` keeps the ids inside the caller's grant
(:func:`granted`), and only those are deleted, in the same transaction. A writer under
another grant that moved a row waits for or is waited on by the lock, and the scope
read is the one it committed; a row created after the lock was taken is not among the
ids chosen: a record another tenant writes is never lost to the delete.

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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from psycopg import Cursor, sql

from bifrost.writes import deletable
from ratatoskr.postgres.database import PostgresDatabase
from ratatoskr.postgres.scope import (
    conjunction_sql,
    filter_params,
    scope_column_list,
    scopes_by_key,
)
from ratatoskr.postgres.text import to_db

FORGET_BATCH = 500


def locked_scopes_sql(table: sql.Composable, key: str) -> sql.Composed:
    """The statement of :func:`granted` on ``table``: the ``key`` and scope columns of
    the rows whose ``key`` is in an array (one parameter), locked ``FOR UPDATE`` in
    ``key`` order."""
    return sql.SQL(
        "SELECT {k}, {axes} FROM {t} WHERE {k} = ANY(%b) ORDER BY {k} FOR UPDATE"
    ).format(
        k=sql.Identifier(key),
        axes=scope_column_list(),
        t=table,
    )


def granted(
    cur: Cursor[Any], statement: sql.Composed, keys: Sequence[str], grant: Mapping[str, str]
) -> list[str]:
    """Of ``keys`` (stored form), those a delete under ``grant`` erases, inside the
    delete's transaction: their rows locked and their scopes read by ``statement``
    (:func:`locked_scopes_sql`), then bifrost's ``deletable``. The rows stay locked
    until the transaction ends."""
    rows = cur.execute(statement, (list(keys),), binary=True).fetchall()
    return deletable(keys, scopes_by_key(rows), grant)


def delete_granted(
    db: PostgresDatabase,
    lock_sql: sql.Composed,
    ids: Sequence[str],
    grant: Mapping[str, str],
    delete: Callable[[Cursor[Any], list[str]], int],
) -> int:
    """A store's ``delete_many`` in one transaction: the rows of the distinct ``ids``
    locked in stored-key order and :func:`granted` decides on their scopes
    (``lock_sql``: :func:`locked_scopes_sql`); ``delete(cur, keys)`` erases the chosen
    keys (stored form, none empty) and returns the count the verb reports."""
    wanted = sorted(map(to_db, ids))
    if not wanted:
        return 0

    def transaction(cur: Cursor[Any]) -> int:
        chosen = granted(cur, lock_sql, wanted, grant)
        return delete(cur, chosen) if chosen else 0

    return db.run(transaction, mode="write")


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
