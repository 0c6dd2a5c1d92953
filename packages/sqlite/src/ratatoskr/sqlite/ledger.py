"""The idempotency ledger: a first call's digest and result, kept until it expires.

A plane decides what the id and digest are (bifrost defines both for the wire);
the ledger only stores them beside the writes of the same transaction, so a
replay either sees the whole first call or nothing of it.

Expired entries are pruned by the writes themselves: every write transaction
that records an entry first drops at most :data:`PRUNE_PER_WRITE` expired ones
(:meth:`IdempotencyLedger.prune`, a range read of the ``expires_at`` index). A
write adds one entry and may remove 64, so the ledger never holds much more than
the entries still inside their TTL, without a sweeper thread, and no write pays
for a backlog at once.

:meth:`IdempotencyLedger.within` joins the ledger to one write transaction: the
result has the methods of bifrost's ``bifrost.writes.Ledger`` (``lookup``,
``record``, ``prune`` without the connection), which the reference stores' dict
ledger has too, so every store runs the same write path
(``bifrost.writes.replay_write`` / ``record_write``).
"""

from __future__ import annotations

import re
from typing import Any

import apsw

from ratatoskr.sqlite import codec
from ratatoskr.storage.ledger import PRUNE_PER_WRITE, LedgerEntry, LedgerTransaction

__all__ = ["PRUNE_PER_WRITE", "IdempotencyLedger", "LedgerEntry", "LedgerTransaction"]

_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")


class IdempotencyLedger:
    """Replay cache in table ``table`` of the plane's database."""

    def __init__(self, table: str) -> None:
        if not _IDENT.match(table):
            raise ValueError("ledger table name must be a plain identifier")
        self.table = table

    def create_sql(self) -> str:
        """DDL for the ledger, for the plane's migration list."""
        return (
            f"CREATE TABLE IF NOT EXISTS {self.table} ("
            " idempotency_id TEXT PRIMARY KEY,"
            " digest TEXT NOT NULL,"
            " result_json TEXT NOT NULL,"
            " expires_at REAL NOT NULL"
            ") WITHOUT ROWID;" + self.index_sql()
        )

    def index_sql(self) -> str:
        """DDL of the ``expires_at`` index pruning reads (idempotent), for a migration
        that adds it to a ledger created without it."""
        return f"CREATE INDEX IF NOT EXISTS {self.table}_expiry ON {self.table}(expires_at);"

    def within(self, conn: apsw.Connection) -> LedgerTransaction[apsw.Connection]:
        """This ledger inside the write transaction of ``conn`` (see the module docstring)."""
        return LedgerTransaction(self, conn)

    def lookup(
        self, conn: apsw.Connection, idempotency_id: str, *, now: float
    ) -> LedgerEntry | None:
        """The live entry for ``idempotency_id``; an expired one counts as absent."""
        rows = conn.execute(
            f"SELECT digest, result_json, expires_at FROM {self.table}"
            " WHERE idempotency_id = ? AND expires_at > ?",
            (idempotency_id, now),
        ).fetchall()
        if not rows:
            return None
        digest, result_json, expires_at = rows[0]
        return LedgerEntry(str(digest), codec.loads(str(result_json)), float(expires_at))  # type: ignore[arg-type]

    def record(
        self,
        conn: apsw.Connection,
        idempotency_id: str,
        *,
        digest: str,
        result: Any,
        expires_at: float,
    ) -> None:
        """Store the first call's outcome (replacing an expired entry of the same id)."""
        conn.execute(
            f"INSERT OR REPLACE INTO {self.table}"
            " (idempotency_id, digest, result_json, expires_at) VALUES (?, ?, ?, ?)",
            (idempotency_id, digest, codec.dumps(result), expires_at),
        )

    def prune(self, conn: apsw.Connection, *, now: float, limit: int = PRUNE_PER_WRITE) -> int:
        """Drop up to ``limit`` expired entries, oldest expiry first; returns how many went.

        Call it inside the write transaction that records an entry: the work per write
        stays bounded by ``limit`` whatever the ledger holds.
        """
        conn.execute(
            f"DELETE FROM {self.table} WHERE idempotency_id IN ("
            f" SELECT idempotency_id FROM {self.table} WHERE expires_at <= ?"
            " ORDER BY expires_at LIMIT ?)",
            (now, limit),
        )
        return int(conn.changes())
