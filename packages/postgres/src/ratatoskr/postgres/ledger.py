"""The idempotency ledger in a plane's schema: a first call's digest and result until it expires.

A write *claims* its idempotency id first, in its own transaction:
``INSERT … ON CONFLICT (id) DO UPDATE … WHERE expired RETURNING``. A row
inserted (or an expired one taken over) belongs to this transaction until it
commits, so a concurrent call with the same id blocks on it and, once this
transaction has committed, finds the finished entry and replays it (or, with
another digest, conflicts); if this transaction rolls back, the blocked call
claims the id itself. Eight concurrent writers of one key give one write and
seven replays without any lock of the process.

Times are the store's injected clock, never the server's ``now()``: the
conformance kit drives expiry with a manual clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import Cursor, sql

from bifrost.idempotency import canonical_json, json_loads_exact

__all__ = ["LedgerEntry", "PostgresLedger"]

# A claim can find an entry that another process's clock already saw as expired
# and pruned before this one could read it; it then claims again.
_CLAIM_ATTEMPTS = 5


@dataclass(frozen=True)
class LedgerEntry:
    digest: str
    result: Any
    expires_at: float


class PostgresLedger:
    """The ledger table ``table`` of a schema (compose its SQL with :meth:`create_sql`)."""

    def __init__(self, table: sql.Composed, index_name: str) -> None:
        self.table = table
        self._index_name = index_name

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

    def claim(
        self,
        cur: Cursor[Any],
        idempotency_id: str,
        *,
        digest: str,
        expires_at: float,
        now: float,
    ) -> LedgerEntry | None:
        """Claim ``idempotency_id`` for the caller's transaction: None when claimed (the
        caller writes, then calls :meth:`finish`), else the live entry of an earlier
        call (a replay when its digest matches)."""
        for _ in range(_CLAIM_ATTEMPTS):
            cur.execute(
                sql.SQL(
                    "INSERT INTO {t} AS l (idempotency_id, digest, result_json, expires_at)"
                    " VALUES (%s, %s, NULL, %s)"
                    " ON CONFLICT (idempotency_id) DO UPDATE SET digest = EXCLUDED.digest,"
                    " result_json = NULL, expires_at = EXCLUDED.expires_at"
                    " WHERE l.expires_at <= %s RETURNING 1"
                ).format(t=self.table),
                (idempotency_id, digest, expires_at, now),
            )
            if cur.fetchone() is not None:
                return None
            cur.execute(
                sql.SQL(
                    "SELECT digest, result_json, expires_at FROM {t}"
                    " WHERE idempotency_id = %s AND expires_at > %s"
                ).format(t=self.table),
                (idempotency_id, now),
            )
            row = cur.fetchone()
            if row is not None and row[1] is not None:
                return LedgerEntry(str(row[0]), json_loads_exact(str(row[1])), float(row[2]))
        raise RuntimeError("the idempotency ledger entry could not be claimed or read")

    def finish(self, cur: Cursor[Any], idempotency_id: str, result: Any) -> None:
        """Store the claimed call's result (same transaction as its writes)."""
        cur.execute(
            sql.SQL("UPDATE {t} SET result_json = %s WHERE idempotency_id = %s").format(
                t=self.table
            ),
            (canonical_json(result).decode("utf-8"), idempotency_id),
        )

    def prune(self, cur: Cursor[Any], *, now: float, limit: int) -> int:
        """Drop up to ``limit`` expired entries; returns how many went. Rows another
        transaction holds (being claimed again) are skipped, never waited for."""
        cur.execute(
            sql.SQL(
                "DELETE FROM {t} WHERE idempotency_id IN ("
                " SELECT idempotency_id FROM {t} WHERE expires_at <= %s"
                " ORDER BY expires_at LIMIT %s FOR UPDATE SKIP LOCKED)"
            ).format(t=self.table),
            (now, limit),
        )
        return cur.rowcount
