"""The idempotency ledger in a plane's schema: a first call's digest and result until it expires.

The API has the shape of ``ratatoskr.sqlite``'s ledger — ``create_sql``,
``within(cursor)`` giving bifrost's ``Ledger`` (``lookup``, ``record``,
``prune``) inside one write transaction — so a store hands it to
``bifrost.writes.replay_write`` / ``record_write`` as the SQLite stores do.

What differs is how ``lookup`` keeps concurrent callers apart. SQLite has one
writer at a time; here many transactions of many processes run at once, so
``lookup`` *claims* the id when it finds no live entry:
``INSERT … ON CONFLICT (id) DO UPDATE … WHERE expired RETURNING``. The row it
inserted (or the expired one it took over) belongs to this transaction until
it commits, so a concurrent call with the same id blocks on it and, once this
transaction has committed, finds the recorded entry and replays it (or, with
another digest, conflicts); if this transaction rolls back, the claim goes with
it and the blocked call claims the id itself. Eight concurrent writers of one
key give one write and seven replays without any lock of the process.

A claimed row carries no result and never expires until ``record`` fills it:
nobody else can see it (it is uncommitted), and ``prune`` in the same
transaction must not take it.

Times are the store's injected clock, never the server's ``now()``: the
conformance kit drives expiry with a manual clock.
"""

from __future__ import annotations

from typing import Any

from psycopg import Cursor, sql

from bifrost.jsoncodec import canonical_json, json_loads_exact
from ratatoskr.postgres.database import on_table
from ratatoskr.postgres.migrations import qualified
from ratatoskr.storage.errors import StorageCorrupt
from ratatoskr.storage.ledger import PRUNE_PER_WRITE, LedgerEntry, LedgerTransaction

__all__ = ["PRUNE_PER_WRITE", "LedgerEntry", "LedgerTransaction", "PostgresLedger"]

# A claim can find an entry that another process's clock already saw as expired
# and pruned before this one could read it; it then claims again.
_CLAIM_ATTEMPTS = 5
_NEVER = float("inf")


class PostgresLedger:
    """The ledger table ``table`` of a schema (compose its SQL with :meth:`create_sql`)."""

    def __init__(self, table: sql.Composed, index_name: str) -> None:
        self.table = table
        self._index_name = index_name
        self._claim_sql = on_table(
            table,
            "INSERT INTO {t} AS l (idempotency_id, digest, result_json, expires_at)"
            " VALUES (%s, '', NULL, 'Infinity')"
            " ON CONFLICT (idempotency_id) DO UPDATE SET digest = '',"
            " result_json = NULL, expires_at = 'Infinity'"
            " WHERE l.expires_at <= %s RETURNING 1",
        )
        self._read_sql = on_table(
            table,
            "SELECT digest, result_json, expires_at FROM {t}"
            " WHERE idempotency_id = %s AND expires_at > %s",
        )
        self._record_sql = on_table(
            table,
            "INSERT INTO {t} (idempotency_id, digest, result_json, expires_at)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT (idempotency_id) DO UPDATE SET"
            " digest = EXCLUDED.digest, result_json = EXCLUDED.result_json,"
            " expires_at = EXCLUDED.expires_at",
        )
        self._prune_sql = on_table(
            table,
            "DELETE FROM {t} WHERE idempotency_id IN ("
            " SELECT idempotency_id FROM {t} WHERE expires_at <= %s"
            " ORDER BY expires_at LIMIT %s FOR UPDATE SKIP LOCKED)",
        )

    @classmethod
    def in_schema(cls, schema: str, table: str) -> PostgresLedger:
        """The ledger table ``table`` of ``schema`` (its expiry index named after it)."""
        return cls(qualified(schema, table), f"{table}_expiry")

    def create_sql(self) -> sql.Composed:
        """DDL for the ledger, for the plane's migration list."""
        return sql.SQL(
            "CREATE TABLE {t} ("
            ' idempotency_id text COLLATE "C" PRIMARY KEY,'
            " digest text NOT NULL,"
            # NULL only inside the claiming transaction: nobody else ever reads it so.
            " result_json text,"
            " expires_at double precision NOT NULL);"
            " CREATE INDEX {i} ON {t} (expires_at);"
        ).format(t=self.table, i=sql.Identifier(self._index_name))

    def within(self, cursor: Cursor[Any]) -> LedgerTransaction[Cursor[Any]]:
        """This ledger inside the write transaction of ``cursor`` (bifrost's ``Ledger``)."""
        return LedgerTransaction(self, cursor)

    def lookup(self, cur: Cursor[Any], idempotency_id: str, *, now: float) -> LedgerEntry | None:
        """The live entry for ``idempotency_id`` (an expired one counts as absent), or
        None — and then the id is claimed for the caller's transaction, which writes
        and then calls :meth:`record` (see the module docstring).

        Raises StorageCorrupt when the id can neither be claimed nor read (only an
        entry pruned again and again between the two statements could do it)."""
        for _ in range(_CLAIM_ATTEMPTS):
            cur.execute(self._claim_sql, (idempotency_id, now))
            if cur.fetchone() is not None:
                return None
            cur.execute(self._read_sql, (idempotency_id, now))
            row = cur.fetchone()
            if row is not None and row[1] is not None:
                return LedgerEntry(str(row[0]), json_loads_exact(str(row[1])), float(row[2]))
        raise StorageCorrupt("an idempotency ledger entry could be neither claimed nor read")

    def record(
        self,
        cur: Cursor[Any],
        idempotency_id: str,
        *,
        digest: str,
        result: Any,
        expires_at: float,
    ) -> None:
        """Store the first call's outcome in the row :meth:`lookup` claimed (same
        transaction as its writes; inserted if no claim was made)."""
        if not expires_at < _NEVER:
            raise ValueError("a ledger entry must expire")
        cur.execute(
            self._record_sql,
            (idempotency_id, digest, canonical_json(result).decode("utf-8"), expires_at),
        )

    def prune(self, cur: Cursor[Any], *, now: float, limit: int = PRUNE_PER_WRITE) -> int:
        """Drop up to ``limit`` expired entries, oldest expiry first; returns how many
        went. Rows another transaction holds (being claimed again) are skipped, never
        waited for; this transaction's own claim never expires, so it stays."""
        cur.execute(self._prune_sql, (now, limit))
        return cur.rowcount
