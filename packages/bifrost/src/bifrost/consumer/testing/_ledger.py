"""The reference stores' idempotency ledger: a dict, with the SQLite ledger's shape.

It is a :class:`bifrost.writes.Ledger` as ``ratatoskr.sqlite``'s
``IdempotencyLedger.within(conn)`` is (the same methods and arguments; the
caller computes the id, :meth:`bifrost.writes.WriteRequest.ledger_id`). It is
not thread-safe on its own: the stores call it under their lock, which is the
transaction of a reference write.

Expired entries are pruned by the writes, at most :data:`PRUNE_PER_WRITE` per
write, oldest expiry first (a heap of expiries beside the dict), as the SQLite
ledger does: the dict never holds much more than the entries still live.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

__all__ = ["PRUNE_PER_WRITE", "DictLedger", "LedgerEntry"]

# The SQLite ledger's bound (ratatoskr.sqlite.ledger.PRUNE_PER_WRITE); bifrost
# cannot import it, and the reference only needs "more than the one a write adds".
PRUNE_PER_WRITE = 64


@dataclass(frozen=True)
class LedgerEntry:
    digest: str
    result: dict[str, Any]
    expires_at: float


class DictLedger:
    """First calls' digests and results by idempotency id, until they expire."""

    def __init__(self) -> None:
        self._entries: dict[str, LedgerEntry] = {}
        self._expiries: list[tuple[float, str]] = []  # a heap; stale pairs are skipped

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, idempotency_id: str, *, now: float) -> LedgerEntry | None:
        """The live entry for ``idempotency_id``; an expired one counts as absent."""
        entry = self._entries.get(idempotency_id)
        if entry is None or entry.expires_at <= now:
            return None
        return entry

    def record(self, idempotency_id: str, *, digest: str, result: Any, expires_at: float) -> None:
        """Store the first call's outcome (replacing an expired entry of the same id)."""
        self._entries[idempotency_id] = LedgerEntry(digest, dict(result), expires_at)
        heapq.heappush(self._expiries, (expires_at, idempotency_id))

    def prune(self, *, now: float, limit: int = PRUNE_PER_WRITE) -> int:
        """Drop up to ``limit`` expired entries, oldest expiry first; returns how many went."""
        dropped = 0
        while dropped < limit and self._expiries and self._expiries[0][0] <= now:
            expires_at, idempotency_id = heapq.heappop(self._expiries)
            entry = self._entries.get(idempotency_id)
            # A pair whose entry was replaced since (a later expiry) is stale.
            if entry is not None and entry.expires_at == expires_at:
                del self._entries[idempotency_id]
                dropped += 1
        return dropped
