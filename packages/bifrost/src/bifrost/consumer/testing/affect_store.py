"""``InMemoryAffectStore``: the reference affect store. Every write of a key
appends its next revision; history is kept until the key is deleted (a key
written again after a delete starts over at revision 1). Thread-safe."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bifrost.affect.protocol import (
    AffectReads,
    AffectWrites,
    affect_health,
    check_affect_limits,
)
from bifrost.affect.validation import (
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_PAGE,
    HistoryQuery,
    ListQuery,
    ValidatedAffect,
)
from bifrost.consumer.testing._ledger import DictLedger
from bifrost.scope import DEFAULT_MAX_SCOPE_ANY, matches_scope
from bifrost.writes import WriteRequest, begin_write

__all__ = ["InMemoryAffectStore", "rfc3339"]


def rfc3339(ts: float) -> str:
    """UTC RFC 3339 with microseconds and a ``Z`` suffix."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass
class _Rev:
    record: dict[str, Any]
    scope: dict[str, str]
    revision: int
    recorded_at: str

    def view(self) -> dict[str, Any]:
        out = copy.deepcopy(self.record)
        out["revision"] = self.revision
        out["recorded_at"] = self.recorded_at
        return out


class InMemoryAffectStore(AffectWrites, AffectReads):
    """Reference ``AffectDataStore``. ``clock`` drives TTLs and ``recorded_at``."""

    def __init__(
        self,
        *,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_page: int = DEFAULT_MAX_PAGE,
        max_scope_any: int = DEFAULT_MAX_SCOPE_ANY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        check_affect_limits(max_batch=max_batch, max_page=max_page, max_scope_any=max_scope_any)
        self.max_batch = max_batch
        self.max_page = max_page
        self.max_scope_any = max_scope_any
        self._clock = clock
        self._lock = threading.RLock()
        self._keys: dict[str, list[_Rev]] = {}  # oldest first
        self._ledger = DictLedger()

    def health(self) -> dict[str, Any]:
        return affect_health(max_batch=self.max_batch, max_page=self.max_page)

    def perform_put(self, request: WriteRequest[ValidatedAffect], actor: str) -> dict[str, Any]:
        """Each record is appended as its key's next revision (under the store's lock)."""
        with self._lock:
            write = begin_write(self._ledger, request, actor, self._clock())
            if write.replayed is not None:
                return write.replayed
            heads = {k: self._keys[k][-1] for k in request.ids if k in self._keys}
            current = {k: head.revision for k, head in heads.items()}
            write.check({k: head.scope for k, head in heads.items()}, current)
            stamp = rfc3339(write.now)
            for it in request:
                revision = current.get(it.key, 0) + 1
                self._keys.setdefault(it.key, []).append(_Rev(it.record, it.scope, revision, stamp))
            return write.record()

    def perform_get(self, keys: Sequence[str]) -> list[dict[str, Any]]:
        with self._lock:
            return [self._keys[k][-1].view() for k in keys if k in self._keys]

    def perform_history(self, query: HistoryQuery) -> dict[str, Any]:
        with self._lock:
            revs = self._keys.get(query.key, [])
            before = query.before_revision
            older = [r for r in reversed(revs) if before is None or r.revision < before]
            page = older[: query.limit]
            more = len(older) > query.limit
            return {
                "items": [r.view() for r in page],
                "next_before_revision": page[-1].revision if more else None,
            }

    def perform_delete(self, keys: Sequence[str]) -> int:
        with self._lock:
            present = [k for k in keys if k in self._keys]
            for k in present:
                del self._keys[k]
            return len(present)

    def perform_list(self, query: ListQuery) -> dict[str, Any]:
        with self._lock:
            keys = sorted(
                k
                for k, revs in self._keys.items()
                if (query.after_key is None or k > query.after_key)
                and matches_scope(revs[-1].scope, query.scope_all, query.scope_any)
            )
            page = keys[: query.limit]
            more = len(keys) > query.limit
            return {
                "items": [self._keys[k][-1].view() for k in page],
                "next_after_key": page[-1] if more else None,
            }
