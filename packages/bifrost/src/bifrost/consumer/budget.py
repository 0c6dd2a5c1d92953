"""A bound on request-body bytes held in memory at once, shared by every plane app of
a process.

Each call reserves its body's declared ``Content-Length`` (the body limit when it
sends none) before reading a byte, and gives it back when its answer is rendered.
A call that does not fit waits — queued, in arrival order of the wake-ups, without
buffering — rather than failing: under a burst of large authenticated bodies memory
stays at the bound and calls slow down, instead of the process growing by the sum
of every body in flight, and staying grown (measured: docs/decisions.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

__all__ = ["DEFAULT_MAX_INFLIGHT_BODY_BYTES", "SMALL_BODY_BYTES", "BodyBudget"]

DEFAULT_MAX_INFLIGHT_BODY_BYTES = 64 * 1024 * 1024
# Bodies up to this size never wait: a few connections declaring 8 MiB bodies and never
# finishing them held the whole budget until their deadline, and every other tenant's
# 300-byte search queued behind them for 15 s. Small bodies stay bounded without it
# (the connection cap × this size).
SMALL_BODY_BYTES = 64 * 1024


class BodyBudget:
    """``limit`` bytes of bodies in flight at most (one event loop; not thread-safe)."""

    def __init__(self, limit: int = DEFAULT_MAX_INFLIGHT_BODY_BYTES) -> None:
        if limit < 1:
            raise ValueError("the body budget must be positive")
        self.limit = limit
        self.in_use = 0
        self._freed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def reserve(self, size: int) -> AsyncIterator[None]:
        """Hold ``size`` bytes (at most the whole budget) for the block; a small body
        (≤ :data:`SMALL_BODY_BYTES`) passes at once without counting."""
        if size <= SMALL_BODY_BYTES:
            yield
            return
        size = min(size, self.limit)
        async with self._freed:
            await self._freed.wait_for(lambda: self.in_use + size <= self.limit)
            self.in_use += size
        try:
            yield
        finally:
            async with self._freed:
                self.in_use -= size
                self._freed.notify_all()
