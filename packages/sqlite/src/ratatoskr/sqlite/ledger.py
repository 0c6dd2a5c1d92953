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

:meth:`IdempotencyLedger.within` joins the ledger to one write transaction in one
step: the :class:`OpenLedger` it returns has the methods of bifrost's
``bifrost.writes.Ledger`` (``lookup``, ``record``, ``prune`` without the connection),
each one statement on that connection, which the reference stores' dict ledger has
too, so every store runs the same write path (``bifrost.writes.begin_write`` /
``OpenWrite.record``).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import apsw

from ratatoskr.sqlite import codec
from ratatoskr.storage.ledger import PRUNE_PER_WRITE, LedgerEntry, LedgerTransaction

__all__ = [
    "PRUNE_PER_WRITE",
    "IdempotencyLedger",
    "LedgerEntry",
    "LedgerTransaction",
    "OpenLedger",
]

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

    def within(self, conn: apsw.Connection) -> OpenLedger:
        """This ledger inside the write transaction of ``conn`` (see the module docstring)."""
        return OpenLedger(self.table, conn)

    def lookup(
        self, conn: apsw.Connection, idempotency_id: str, *, now: float
    ) -> LedgerEntry | None:
        """The live entry for ``idempotency_id``; an expired one counts as absent."""
        return self.within(conn).lookup(idempotency_id, now=now)

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
        self.within(conn).record(
            idempotency_id, digest=digest, result=result, expires_at=expires_at
        )

    def prune(self, conn: apsw.Connection, *, now: float, limit: int = PRUNE_PER_WRITE) -> int:
        """Drop up to ``limit`` expired entries, oldest expiry first; returns how many went.

        Call it inside the write transaction that records an entry: the work per write
        stays bounded by ``limit`` whatever the ledger holds.
        """
        return self.within(conn).prune(now=now, limit=limit)


class OpenLedger:
    """A ledger table inside one write transaction: bifrost's ``Ledger`` (``lookup``,
    ``record``, ``prune``), each one statement on the transaction's connection."""

    __slots__ = ("_conn", "_sql")

    def __init__(self, table: str, conn: apsw.Connection) -> None:
        self._conn = conn
        self._sql = _statements(table)

    def lookup(self, idempotency_id: str, *, now: float) -> LedgerEntry | None:
        """The live entry for ``idempotency_id``; an expired one counts as absent."""
        for digest, result_json, expires_at in self._conn.execute(
            self._sql[0], (idempotency_id, now)
        ):
            return LedgerEntry(str(digest), codec.loads(str(result_json)), float(expires_at))
        return None

    def record(self, idempotency_id: str, *, digest: str, result: Any, expires_at: float) -> None:
        """Store the first call's outcome (replacing an expired entry of the same id)."""
        self._conn.execute(self._sql[1], (idempotency_id, digest, codec.dumps(result), expires_at))

    def prune(self, *, now: float, limit: int = PRUNE_PER_WRITE) -> int:
        """Drop up to ``limit`` expired entries, oldest expiry first; how many went."""
        self._conn.execute(self._sql[2], (now, limit))
        return int(self._conn.changes())


@functools.cache
def _statements(table: str) -> tuple[str, str, str]:
    """The lookup, record and prune statements of the ledger in ``table`` (made once:
    the same text finds apsw's prepared statement)."""
    return (
        f"SELECT digest, result_json, expires_at FROM {table}"
        " WHERE idempotency_id = ? AND expires_at > ?",
        f"INSERT OR REPLACE INTO {table}"
        " (idempotency_id, digest, result_json, expires_at) VALUES (?, ?, ?, ?)",
        f"DELETE FROM {table} WHERE idempotency_id IN ("
        f" SELECT idempotency_id FROM {table} WHERE expires_at <= ?"
        " ORDER BY expires_at LIMIT ?)",
    )
