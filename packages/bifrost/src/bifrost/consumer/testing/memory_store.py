"""``InMemoryMemoryStore``: the reference memory store, the authority real stores
are held to. Exact brute-force cosine search in pure Python; thread-safe."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Unpack

from bifrost.consumer.testing import portability
from bifrost.consumer.testing._ledger import DictLedger
from bifrost.memory.filters import MetadataFilter
from bifrost.memory.protocol import MemoryOptions, MemoryReads, MemoryWrites
from bifrost.memory.retention import expiry_cutoff, is_expired
from bifrost.memory.validation import (
    ScanQuery,
    SearchQuery,
    ValidatedChunk,
    scan_item,
    search_row,
    unit_vector,
)
from bifrost.portability import ExportedChunk, ImportedChunks, ImportOutcome, OnConflict
from bifrost.quota import TenantUsage, batch_tenants, check_quota, tenant_of
from bifrost.scope import matches_scope
from bifrost.writes import WriteRequest, begin_write, deletable

__all__ = ["InMemoryMemoryStore"]


@dataclass
class _Chunk:
    record: dict[str, Any]
    scope: dict[str, str]
    unit: list[float]
    revision: int
    size: int = 0  # bytes it counts for in its tenant's quota
    written_at: float = 0.0  # when it was last written (an export carries it)


class InMemoryMemoryStore(MemoryWrites, MemoryReads):
    """Reference ``MemoryDataStore``.

    ``clock`` (seconds since the epoch) drives the idempotency TTL;
    ``filterable_fields`` are the fields a ``metadata_filter`` may name (none: v1),
    evaluated by :meth:`bifrost.memory.filters.MetadataFilter.matches`;
    ``retention_s`` expires chunks by the clock (:mod:`bifrost.memory.retention`:
    filtered out of every read until :meth:`sweep_expired` erases them).
    """

    def __init__(self, embedding_dim: int, **options: Unpack[MemoryOptions]) -> None:
        # Options and their defaults: bifrost.memory.protocol.MemoryOptions.
        if isinstance(embedding_dim, bool) or not isinstance(embedding_dim, int):
            raise TypeError("embedding_dim must be an int")
        self.take_options(embedding_dim, options)
        self._lock = threading.RLock()
        self._chunks: dict[str, _Chunk] = {}
        self._ledger = DictLedger()
        self._usage = TenantUsage()

    def perform_upsert(self, request: WriteRequest[ValidatedChunk], actor: str) -> dict[str, Any]:
        """Each chunk becomes its id's next revision (dicts, under the store's lock)."""
        with self._lock:
            write = begin_write(self._ledger, request, actor, self._clock())
            if write.replayed is not None:
                return write.replayed
            held = {cid: self._chunks[cid] for cid in request.ids if cid in self._chunks}
            # An expired chunk is absent to the checks (its revision starts again at 1);
            # its row is still replaced (and leaves its tenant's usage).
            cutoff = self._cutoff()
            live = {cid: c for cid, c in held.items() if not is_expired(c.written_at, cutoff)}
            current = {cid: c.revision for cid, c in live.items()}
            write.check({cid: c.scope for cid, c in live.items()}, current)
            sizes = request.record_sizes()
            usage = self._usage.after(
                [(tenant_of(c.scope), -1, -c.size) for c in held.values()]
                + [(tenant_of(c.scope), 1, n) for c, n in zip(request, sizes, strict=True)]
            )
            check_quota({t: usage[t] for t in batch_tenants(request)}, self.quota)
            self._usage.apply(usage)
            for c, size in zip(request, sizes, strict=True):
                revision = current.get(c.id, 0) + 1
                unit = unit_vector(c.embedding)
                self._chunks[c.id] = _Chunk(c.record, c.scope, unit, revision, size, write.now)
            return write.record()

    def perform_search(self, query: SearchQuery) -> list[dict[str, Any]]:
        """Exact brute-force cosine over every chunk in scope (under the store's lock)."""
        unit = unit_vector(query.vector)
        with self._lock:
            cutoff = self._cutoff()
            scored = [
                (max(-1.0, min(1.0, sum(a * b for a, b in zip(unit, c.unit, strict=True)))), cid, c)
                for cid, c in self._chunks.items()
                if _passes(c, query.scope_all, query.scope_any, query.metadata_filter)
                and not is_expired(c.written_at, cutoff)
            ]
            scored.sort(key=lambda t: (-t[0], t[1]))
            return [
                search_row(copy.deepcopy(c.record), cid, score, c.revision, query.include_embedding)
                for score, cid, c in scored[: query.top_k]
            ]

    def perform_scan(self, query: ScanQuery) -> list[tuple[str, dict[str, Any]]]:
        """Every chunk in scope and filter above ``after_id``, sorted (under the lock)."""
        with self._lock:
            cutoff = self._cutoff()
            ids = sorted(
                cid
                for cid, c in self._chunks.items()
                if (query.after_id is None or cid > query.after_id)
                and not is_expired(c.written_at, cutoff)
                and _passes(c, query.scope_all, query.scope_any, query.metadata_filter)
            )[: query.limit + 1]
            return [
                (
                    cid,
                    scan_item(
                        copy.deepcopy(self._chunks[cid].record),
                        self._chunks[cid].revision,
                        query.include_embedding,
                    ),
                )
                for cid in ids
            ]

    def _cutoff(self) -> float | None:
        return expiry_cutoff(self._clock(), self.retention_s)

    def _live(self, cid: str) -> _Chunk | None:
        """The chunk of ``cid`` unless absent or expired (lock held)."""
        c = self._chunks.get(cid)
        return None if c is None or is_expired(c.written_at, self._cutoff()) else c

    def _read(self, cid: str) -> dict[str, Any] | None:
        c = self._live(cid)
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
            live = {cid: self._live(cid) for cid in ids}
            return {cid: dict(c.scope) for cid, c in live.items() if c is not None}

    def export_page(
        self, after_id: str | None, limit: int, scope_all: Mapping[str, str]
    ) -> tuple[list[ExportedChunk], str | None]:
        """A keyset page for an export (:mod:`bifrost.consumer.testing.portability`)."""
        return portability.export_chunks(self, after_id, limit, scope_all)

    def import_chunks(
        self, batch: ImportedChunks, on_conflict: OnConflict, *, allow_scope_change: bool = False
    ) -> ImportOutcome:
        """One import batch (:mod:`bifrost.consumer.testing.portability`)."""
        return portability.import_chunks(
            self, batch, on_conflict, _Chunk, allow_scope_change=allow_scope_change
        )

    def forget(self, scope: dict[str, str], *, dry_run: bool = False) -> int:
        """Erase every chunk whose scope contains ``scope``'s axes, expired ones
        included; the count (``dry_run``: count only). What ``ratatoskr forget`` does
        on a real store. Raises ValueError for an empty ``scope`` (every chunk)."""
        if not scope:
            raise ValueError("forget needs at least one scope axis")
        with self._lock:
            wanted = [
                k
                for k, c in self._chunks.items()
                if all(c.scope.get(a) == v for a, v in scope.items())
            ]
            if not dry_run:
                self._erase(wanted)
            return len(wanted)

    def perform_delete(self, ids: Sequence[str], grant: Mapping[str, str]) -> int:
        """Erase the chunks of ``ids`` inside ``grant`` (decided under the lock, where
        the scopes are read); counts the live ones (expired ones go too)."""
        with self._lock:
            chosen = deletable(
                ids, {cid: self._chunks[cid].scope for cid in ids if cid in self._chunks}, grant
            )
            counted = sum(1 for cid in chosen if self._live(cid) is not None)
            self._erase(chosen)
            return counted

    def sweep_expired(self, limit: int | None = None) -> int:
        """Erase up to ``limit`` (None: all) expired chunks, oldest first; how many.
        What a real store's background retention sweep does."""
        with self._lock:
            cutoff = self._cutoff()
            expired = sorted(
                (c.written_at, cid)
                for cid, c in self._chunks.items()
                if is_expired(c.written_at, cutoff)
            )[:limit]
            self._erase([cid for _at, cid in expired])
            return len(expired)

    def _erase(self, present: Sequence[str]) -> None:
        gone = [self._chunks[cid] for cid in present]
        self._usage.apply(self._usage.after((tenant_of(c.scope), -1, -c.size) for c in gone))
        for cid in present:
            del self._chunks[cid]


def _passes(
    c: _Chunk,
    scope_all: dict[str, str],
    scope_any: list[dict[str, str]],
    metadata_filter: MetadataFilter | None,
) -> bool:
    return matches_scope(c.scope, scope_all, scope_any) and (
        metadata_filter is None or metadata_filter.matches(c.record)
    )
