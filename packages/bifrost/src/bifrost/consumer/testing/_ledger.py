"""An in-memory idempotency ledger for the reference stores (not thread-safe on
its own: the stores call it under their lock)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bifrost.errors import IdempotencyConflict
from bifrost.idempotency import idempotency_id, ttl_seconds


@dataclass
class _Entry:
    digest: str
    result: dict[str, Any]
    expires_at: float


class IdempotencyLedger:
    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def lookup(
        self, verb: str, actor: str, key: str, digest: str, now: float
    ) -> dict[str, Any] | None:
        """The replayed result, or None if absent/expired; ``IdempotencyConflict``
        when the key was used with another payload."""
        entry = self._entries.get(idempotency_id(verb, actor, key))
        if entry is None or entry.expires_at <= now:
            return None
        if entry.digest != digest:
            raise IdempotencyConflict("idempotency key reused with a different request")
        return {**entry.result, "replayed": True}

    def record(
        self,
        *,
        verb: str,
        actor: str,
        key: str,
        digest: str,
        result: dict[str, Any],
        idempotency_class: str | None,
        now: float,
    ) -> None:
        self._entries[idempotency_id(verb, actor, key)] = _Entry(
            digest, dict(result), now + ttl_seconds(idempotency_class)
        )
