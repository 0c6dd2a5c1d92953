"""``InMemoryMemoryStore``: the reference memory store, the authority real stores
are held to. Exact brute-force cosine search in pure Python; thread-safe."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bifrost.consumer.testing._ledger import DictLedger
from bifrost.memory.protocol import MemoryReads, MemoryWrites, memory_health
from bifrost.memory.validation import (
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_TOP_K,
    SearchQuery,
    ValidatedChunk,
    search_row,
    unit_vector,
)
from bifrost.scope import DEFAULT_MAX_SCOPE_ANY, matches_scope
from bifrost.writes import WriteRequest, begin_write

__all__ = ["InMemoryMemoryStore"]


@dataclass
class _Chunk:
    record: dict[str, Any]
    scope: dict[str, str]
    unit: list[float]
    revision: int


class InMemoryMemoryStore(MemoryWrites, MemoryReads):
    """Reference ``MemoryDataStore``.

    ``clock`` (seconds since the epoch) drives the idempotency TTL.
    """

    def __init__(
        self,
        embedding_dim: int,
        *,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_top_k: int = DEFAULT_MAX_TOP_K,
        max_scope_any: int = DEFAULT_MAX_SCOPE_ANY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if isinstance(embedding_dim, bool) or not isinstance(embedding_dim, int):
            raise TypeError("embedding_dim must be an int")
        if embedding_dim < 1 or max_batch < 1 or max_top_k < 1 or max_scope_any < 1:
            raise ValueError("embedding_dim and every limit must be positive")
        self.embedding_dim = embedding_dim
        self.max_batch = max_batch
        self.max_top_k = max_top_k
        self.max_scope_any = max_scope_any
        self._clock = clock
        self._lock = threading.RLock()
        self._chunks: dict[str, _Chunk] = {}
        self._ledger = DictLedger()

    def health(self) -> dict[str, Any]:
        return memory_health(
            embedding_dim=self.embedding_dim, max_batch=self.max_batch, max_top_k=self.max_top_k
        )

    def perform_upsert(self, request: WriteRequest[ValidatedChunk], actor: str) -> dict[str, Any]:
        """Each chunk becomes its id's next revision (dicts, under the store's lock)."""
        with self._lock:
            write = begin_write(self._ledger, request, actor, self._clock())
            if write.replayed is not None:
                return write.replayed
            held = {cid: self._chunks[cid] for cid in request.ids if cid in self._chunks}
            current = {cid: c.revision for cid, c in held.items()}
            write.check({cid: c.scope for cid, c in held.items()}, current)
            for c in request:
                revision = current.get(c.id, 0) + 1
                self._chunks[c.id] = _Chunk(c.record, c.scope, unit_vector(c.embedding), revision)
            return write.record()

    def perform_search(self, query: SearchQuery) -> list[dict[str, Any]]:
        """Exact brute-force cosine over every chunk in scope (under the store's lock)."""
        unit = unit_vector(query.vector)
        with self._lock:
            scored = [
                (max(-1.0, min(1.0, sum(a * b for a, b in zip(unit, c.unit, strict=True)))), cid, c)
                for cid, c in self._chunks.items()
                if matches_scope(c.scope, query.scope_all, query.scope_any)
            ]
            scored.sort(key=lambda t: (-t[0], t[1]))
            return [
                search_row(copy.deepcopy(c.record), cid, score, c.revision, query.include_embedding)
                for score, cid, c in scored[: query.top_k]
            ]

    def _read(self, cid: str) -> dict[str, Any] | None:
        c = self._chunks.get(cid)
        if c is None:
            return None
        out = copy.deepcopy(c.record)
        out["revision"] = c.revision
        return out

    def perform_get(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in (self._read(cid) for cid in ids) if r is not None]

    def perform_scopes_of(self, ids: Sequence[str]) -> dict[str, dict[str, str]]:
        with self._lock:
            return {cid: dict(self._chunks[cid].scope) for cid in ids if cid in self._chunks}

    def perform_delete(self, ids: Sequence[str]) -> int:
        with self._lock:
            present = [cid for cid in ids if cid in self._chunks]
            for cid in present:
                del self._chunks[cid]
            return len(present)
