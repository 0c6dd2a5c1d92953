"""LedgerTransaction binds a backend's ledger to one transaction handle."""

from __future__ import annotations

from typing import Any

from ratatoskr import postgres, sqlite
from ratatoskr.storage.ledger import PRUNE_PER_WRITE, LedgerEntry, LedgerTransaction


class _Ledger:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def lookup(self, handle: str, idempotency_id: str, *, now: float) -> LedgerEntry | None:
        self.calls.append(("lookup", handle, idempotency_id, now))
        return LedgerEntry("d", {"n": 1}, now + 1)

    def record(
        self, handle: str, idempotency_id: str, *, digest: str, result: Any, expires_at: float
    ) -> None:
        self.calls.append(("record", handle, idempotency_id, digest, result, expires_at))

    def prune(self, handle: str, *, now: float, limit: int = PRUNE_PER_WRITE) -> int:
        self.calls.append(("prune", handle, now, limit))
        return 3


def test_every_call_carries_the_transactions_handle() -> None:
    ledger = _Ledger()
    tx = LedgerTransaction(ledger, "tx-1")
    assert tx.lookup("id", now=5.0) == LedgerEntry("d", {"n": 1}, 6.0)
    tx.record("id", digest="d", result={"n": 1}, expires_at=9.0)
    assert tx.prune(now=5.0) == 3
    assert ledger.calls == [
        ("lookup", "tx-1", "id", 5.0),
        ("record", "tx-1", "id", "d", {"n": 1}, 9.0),
        ("prune", "tx-1", 5.0, PRUNE_PER_WRITE),
    ]


def test_both_backends_share_the_entry_and_the_prune_bound() -> None:
    assert sqlite.LedgerEntry is postgres.LedgerEntry is LedgerEntry
    assert sqlite.LedgerTransaction is postgres.LedgerTransaction is LedgerTransaction
    assert postgres.PRUNE_PER_WRITE == PRUNE_PER_WRITE
