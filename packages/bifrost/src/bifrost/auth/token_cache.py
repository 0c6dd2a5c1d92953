"""Token caches: where a verifier remembers the ``jti`` of every token it accepted.

A token is good once *per deployment*: every process that serves the same plane
(workers of one server, the combined provider and a standalone plane, the same
provider after a restart) must refuse a ``jti`` any of them accepted, until the
token could no longer be accepted anyway (``exp`` plus the clock-skew leeway).
The verifier takes any object with this module's :class:`TokenCache` methods;
a backend that many processes share provides one (ratatoskr keeps it in a
small SQLite file beside each plane's database, or in PostgreSQL).

:class:`InMemoryTokenCache` is the single-process implementation: right for
tests, in-memory databases and one process that never restarts — nothing else.
"""

from __future__ import annotations

import heapq
import threading
from typing import Protocol, runtime_checkable

__all__ = ["InMemoryTokenCache", "TokenCache"]


@runtime_checkable
class TokenCache(Protocol):
    """What a verifier needs of a token cache. Both methods are thread-safe."""

    def check_and_add(self, jti: str, expires_at: float, now: float) -> bool:
        """Remember ``jti`` until ``expires_at``, atomically for every process that
        shares the cache; False if it is already remembered (a replay). An entry
        whose ``expires_at`` is at or before ``now`` counts as forgotten."""
        ...

    def seen(self, jti: str, now: float) -> bool:
        """Whether ``jti`` is remembered and unexpired: a cheap early answer that
        must never wait on a writer (the authoritative check is ``check_and_add``)."""
        ...


class InMemoryTokenCache:
    """Bounded, thread-safe set of seen ``jti`` values with expiry, one process only.

    Expired entries are dropped on every insert; when the cache is still full
    the entry that expires soonest is evicted (its token is the closest to
    becoming unacceptable anyway). With 100 000 entries and a 300 s maximum
    lifetime, evicting a still-valid entry needs more than ~330 accepted tokens
    per second, sustained.
    """

    def __init__(self, size: int = 100_000) -> None:
        if size < 1:
            raise ValueError("token_cache_size must be positive")
        self.size = size
        self._lock = threading.Lock()
        self._expiry: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return len(self._expiry)

    def seen(self, jti: str, now: float) -> bool:
        with self._lock:
            expiry = self._expiry.get(jti)
            return expiry is not None and expiry > now

    def check_and_add(self, jti: str, expires_at: float, now: float) -> bool:
        with self._lock:
            while self._heap and self._heap[0][0] <= now:
                _, old = heapq.heappop(self._heap)
                self._expiry.pop(old, None)
            if jti in self._expiry:
                return False
            while len(self._expiry) >= self.size:
                _, old = heapq.heappop(self._heap)
                self._expiry.pop(old, None)
            self._expiry[jti] = expires_at
            heapq.heappush(self._heap, (expires_at, jti))
            return True
