"""``InMemoryAffectStore``: the reference affect store. Every write of a key
appends its next revision; history is kept until the key is deleted (a key
written again after a delete starts over at revision 1). Thread-safe."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Unpack

from bifrost.affect.protocol import AffectOptions, AffectReads, AffectWrites
from bifrost.affect.validation import (
    HistoryQuery,
    ListQuery,
    ValidatedAffect,
)
from bifrost.consumer.testing import portability
from bifrost.consumer.testing._ledger import DictLedger
from bifrost.portability import ExportedKey, ImportedKeys, ImportOutcome, OnConflict
from bifrost.quota import TenantUsage, batch_tenants, check_quota, tenant_of
from bifrost.scope import matches_scope
from bifrost.timestamps import rfc3339
from bifrost.writes import WriteRequest, begin_write, deletable

__all__ = ["InMemoryAffectStore"]


@dataclass
class _Rev:
    record: dict[str, Any]
    scope: dict[str, str]
    revision: int
    recorded_at: str
    size: int = 0  # bytes it counts for in its key's tenant's quota

    def view(self) -> dict[str, Any]:
        out = copy.deepcopy(self.record)
        out["revision"] = self.revision
        out["recorded_at"] = self.recorded_at
        return out


class InMemoryAffectStore(AffectWrites, AffectReads):
    """Reference ``AffectDataStore``. ``clock`` drives TTLs and ``recorded_at``."""

    def __init__(self, **options: Unpack[AffectOptions]) -> None:
        # Options and their defaults: bifrost.affect.protocol.AffectOptions.
        self.take_options(options)
        self._lock = threading.RLock()
        self._keys: dict[str, list[_Rev]] = {}  # oldest first
        self._ledger = DictLedger()
        # A key counts once, with the bytes of every revision it keeps, for the tenant
        # of its newest revision.
        self._usage = TenantUsage()

    def perform_put(self, request: WriteRequest[ValidatedAffect], actor: str) -> dict[str, Any]:
        """Each record is appended as its key's next revision (under the store's lock)."""
        with self._lock:
            write = begin_write(self._ledger, request, actor, self._clock())
            if write.replayed is not None:
                return write.replayed
            heads = {k: self._keys[k][-1] for k in request.ids if k in self._keys}
            current = {k: head.revision for k, head in heads.items()}
            write.check({k: head.scope for k, head in heads.items()}, current)
            sizes = request.record_sizes()
            usage = self._usage.after(
                [(tenant_of(heads[k].scope), -1, -self._bytes(k)) for k in heads]
                + [
                    (tenant_of(it.scope), 1, n + (self._bytes(it.key) if it.key in heads else 0))
                    for it, n in zip(request, sizes, strict=True)
                ]
            )
            check_quota({t: usage[t] for t in batch_tenants(request)}, self.quota)
            self._usage.apply(usage)
            stamp = rfc3339(write.now)
            for it, size in zip(request, sizes, strict=True):
                revision = current.get(it.key, 0) + 1
                rev = _Rev(it.record, it.scope, revision, stamp, size)
                self._keys.setdefault(it.key, []).append(rev)
            return write.record()

    def _bytes(self, key: str) -> int:
        """What ``key`` counts for: the bytes of every revision it keeps."""
        return sum(r.size for r in self._keys[key])

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

    def export_page(
        self, after_key: str | None, limit: int, scope_all: Mapping[str, str]
    ) -> tuple[list[ExportedKey], str | None]:
        """A keyset page for an export (:mod:`bifrost.consumer.testing.portability`)."""
        return portability.export_keys(self, after_key, limit, scope_all)

    def import_keys(
        self, batch: ImportedKeys, on_conflict: OnConflict, *, allow_scope_change: bool = False
    ) -> ImportOutcome:
        """One import batch (:mod:`bifrost.consumer.testing.portability`)."""
        return portability.import_keys(
            self, batch, on_conflict, _Rev, allow_scope_change=allow_scope_change
        )

    def forget(self, scope: dict[str, str], *, dry_run: bool = False) -> int:
        """Erase every key (whole history) whose scope contains ``scope``'s axes; the count
        (``dry_run``: count only). What ``ratatoskr forget`` does on a real store.
        Raises ValueError for an empty ``scope`` (every key)."""
        if not scope:
            raise ValueError("forget needs at least one scope axis")
        with self._lock:
            wanted = [
                k
                for k, c in self._keys.items()
                if all(c[-1].scope.get(a) == v for a, v in scope.items())
            ]
        # Re-checked under the lock: a key rewritten into another scope meanwhile stays.
        return len(wanted) if dry_run else self.perform_delete(wanted, scope)

    def perform_delete(self, keys: Sequence[str], grant: Mapping[str, str]) -> int:
        with self._lock:
            present = deletable(
                keys, {k: self._keys[k][-1].scope for k in keys if k in self._keys}, grant
            )
            self._usage.apply(
                self._usage.after(
                    (tenant_of(self._keys[k][-1].scope), -1, -self._bytes(k)) for k in present
                )
            )
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
