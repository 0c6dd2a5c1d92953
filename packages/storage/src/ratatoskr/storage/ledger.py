"""What every backend's idempotency ledger shares.

A backend keeps the ledger in its own database, beside the writes of the same
transaction (``ratatoskr.sqlite.IdempotencyLedger``,
``ratatoskr.postgres.PostgresLedger``); each takes the transaction's handle (an
apsw connection, a psycopg cursor) as its first argument. Bound to one handle, a
ledger has the methods of bifrost's ``bifrost.writes.Ledger`` (``lookup``,
``record``, ``prune``), so every store runs bifrost's one write path whatever its
backend: :class:`LedgerTransaction` binds any :class:`HandleLedger` (PostgreSQL's);
SQLite's ``IdempotencyLedger.within`` returns its own ``OpenLedger``, whose methods
run their statements on the connection directly (one step, on every write).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["PRUNE_PER_WRITE", "HandleLedger", "LedgerEntry", "LedgerTransaction"]

# Expired entries dropped per write: more than the one entry a write adds, so a
# backlog (an upgraded database, a burst of calls whose TTLs end together) drains,
# at the cost of one bounded range delete on the expiry index per call.
PRUNE_PER_WRITE = 64

_H = TypeVar("_H")
_H_contra = TypeVar("_H_contra", contravariant=True)


@dataclass(frozen=True)
class LedgerEntry:
    """A first call's digest and result, live until ``expires_at``."""

    digest: str
    result: Any
    expires_at: float


class HandleLedger(Protocol[_H_contra]):
    """A backend's ledger: each method runs in the transaction of ``handle``."""

    def lookup(self, handle: _H_contra, idempotency_id: str, *, now: float) -> LedgerEntry | None:
        """The live entry for ``idempotency_id``; an expired one counts as absent."""
        ...

    def record(
        self,
        handle: _H_contra,
        idempotency_id: str,
        *,
        digest: str,
        result: Any,
        expires_at: float,
    ) -> None:
        """Keep ``result`` under ``idempotency_id`` until ``expires_at``."""
        ...

    def prune(self, handle: _H_contra, *, now: float, limit: int = PRUNE_PER_WRITE) -> int:
        """Drop at most ``limit`` expired entries; how many went."""
        ...


class LedgerTransaction(Generic[_H]):
    """``ledger`` inside the write transaction of ``handle``: bifrost's ``Ledger``."""

    __slots__ = ("handle", "ledger")

    def __init__(self, ledger: HandleLedger[_H], handle: _H) -> None:
        self.ledger = ledger
        self.handle = handle

    def lookup(self, idempotency_id: str, *, now: float) -> LedgerEntry | None:
        """The ledger's ``lookup`` in this transaction."""
        return self.ledger.lookup(self.handle, idempotency_id, now=now)

    def record(self, idempotency_id: str, *, digest: str, result: Any, expires_at: float) -> None:
        """The ledger's ``record`` in this transaction."""
        self.ledger.record(
            self.handle, idempotency_id, digest=digest, result=result, expires_at=expires_at
        )

    def prune(self, *, now: float, limit: int = PRUNE_PER_WRITE) -> int:
        """The ledger's ``prune`` in this transaction."""
        return self.ledger.prune(self.handle, now=now, limit=limit)
