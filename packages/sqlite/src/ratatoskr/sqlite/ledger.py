"""The idempotency ledger: a first call's digest and result, kept until it expires.

A plane decides what the id and digest are (bifrost defines both for the wire);
the ledger only stores them beside the writes of the same transaction, so a
replay either sees the whole first call or nothing of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import apsw

from ratatoskr.sqlite import codec

_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")


@dataclass(frozen=True)
class LedgerEntry:
    digest: str
    result: Any
    expires_at: float


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
            ") WITHOUT ROWID;"
            f"CREATE INDEX IF NOT EXISTS {self.table}_expiry ON {self.table}(expires_at);"
        )

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

    def prune(self, conn: apsw.Connection, *, now: float, limit: int = 1000) -> int:
        """Drop up to ``limit`` expired entries; returns how many went."""
        conn.execute(
            f"DELETE FROM {self.table} WHERE idempotency_id IN ("
            f" SELECT idempotency_id FROM {self.table} WHERE expires_at <= ? LIMIT ?)",
            (now, limit),
        )
        return int(conn.changes())
