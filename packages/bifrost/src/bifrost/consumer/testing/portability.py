"""Export and import of the reference stores: what every backend's ``export_page``
and ``import_chunks`` / ``import_keys`` must do (:mod:`bifrost.portability`), in
dicts under the store's lock.

An export leaves out chunks expired under the store's retention, as every read
does. An import keeps each tenant's usage (:mod:`bifrost.quota`) as its records
count, but is not refused by a quota: it is an operator's action on the whole plane.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bifrost.memory.retention import is_expired
from bifrost.memory.validation import unit_vector
from bifrost.portability import (
    ExportedChunk,
    ExportedKey,
    HeldChunk,
    History,
    ImportedChunks,
    ImportedKeys,
    ImportOutcome,
    ImportPlan,
    OnConflict,
    import_chunk_batch,
    import_key_batch,
)
from bifrost.quota import record_size, tenant_of
from bifrost.scope import matches_scope

if TYPE_CHECKING:
    from bifrost.consumer.testing.affect_store import InMemoryAffectStore
    from bifrost.consumer.testing.memory_store import InMemoryMemoryStore

__all__ = ["export_chunks", "export_keys", "import_chunks", "import_keys"]


def export_chunks(
    store: InMemoryMemoryStore, after_id: str | None, limit: int, scope_all: Mapping[str, str]
) -> tuple[list[ExportedChunk], str | None]:
    """Up to ``limit`` chunks after ``after_id`` in id order, those whose scope contains
    ``scope_all`` and not expired; and the cursor of the next page (None: done)."""
    with store._lock:
        cutoff = store._cutoff()
        ids = sorted(cid for cid in store._chunks if after_id is None or cid > after_id)[:limit]
        out = [
            ExportedChunk(cid, copy.deepcopy(c.record), c.revision, c.written_at)
            for cid in ids
            if matches_scope((c := store._chunks[cid]).scope, dict(scope_all), None)
            and not is_expired(c.written_at, cutoff)
        ]
    return out, ids[-1] if len(ids) == limit else None


class _ChunkTx:
    """An import batch under the memory store's lock (bifrost.portability.ChunkImportTx)."""

    def __init__(self, store: InMemoryMemoryStore, chunk: Callable[..., Any]) -> None:
        self._store = store
        self._chunk = chunk
        self.cutoff = store._cutoff

    def held(self, ids: Sequence[str]) -> dict[str, HeldChunk]:
        chunks = self._store._chunks
        return {
            cid: HeldChunk(c.record, c.revision, c.written_at)
            for cid in ids
            if (c := chunks.get(cid)) is not None
        }

    def write(self, batch: ImportedChunks, plan: ImportPlan) -> None:
        store, items, ids = self._store, batch.request.items, batch.request.ids
        sizes = batch.request.record_sizes()
        chosen = sorted(plan.new + plan.over)
        gone = [store._chunks[ids[i]] for i in plan.over]
        store._usage.apply(
            store._usage.after(
                [(tenant_of(c.scope), -1, -c.size) for c in gone]
                + [(tenant_of(items[i].scope), 1, sizes[i]) for i in chosen]
            )
        )
        for i in chosen:
            item = items[i]
            store._chunks[item.id] = self._chunk(
                copy.deepcopy(item.record),
                dict(item.scope),
                unit_vector(item.embedding),
                plan.revisions[i],
                sizes[i],
                batch.written_at[i],
            )


def import_chunks(
    store: InMemoryMemoryStore,
    batch: ImportedChunks,
    on_conflict: OnConflict,
    chunk: Callable[..., Any],
    *,
    allow_scope_change: bool = False,
) -> ImportOutcome:
    """Write ``batch`` with its revisions and write times, under the store's lock, each
    as the store's ``chunk`` (its row type). Raises ImportConflict, ImportScopeChange
    (nothing written)."""
    with store._lock:
        tx = _ChunkTx(store, chunk)
        return import_chunk_batch(tx, batch, on_conflict, allow_scope_change=allow_scope_change)


def export_keys(
    store: InMemoryAffectStore, after_key: str | None, limit: int, scope_all: Mapping[str, str]
) -> tuple[list[ExportedKey], str | None]:
    """Up to ``limit`` keys after ``after_key`` in key order whose current scope contains
    ``scope_all``, each with its whole history; and the cursor (None: done)."""
    with store._lock:
        keys = sorted(k for k in store._keys if after_key is None or k > after_key)[:limit]
        out = [
            ExportedKey(
                k,
                revs[-1].revision,
                tuple((r.revision, copy.deepcopy(r.record), r.recorded_at) for r in revs),
            )
            for k in keys
            if matches_scope((revs := store._keys[k])[-1].scope, dict(scope_all), None)
        ]
    return out, keys[-1] if len(keys) == limit else None


class _KeyTx:
    """An import batch under the affect store's lock (bifrost.portability.KeyImportTx)."""

    def __init__(self, store: InMemoryAffectStore, revision: Callable[..., Any]) -> None:
        self._store = store
        self._revision = revision

    def held(self, keys: Sequence[str]) -> dict[str, History]:
        return {
            key: tuple((r.revision, r.record, r.recorded_at) for r in revs)
            for key in keys
            if (revs := self._store._keys.get(key)) is not None
        }

    def write(self, batch: ImportedKeys, plan: ImportPlan) -> None:
        store = self._store
        changes: list[tuple[str, int, int]] = []
        for i in plan.over:
            revs = store._keys.pop(batch.keys[i].key)
            changes.append((tenant_of(revs[-1].scope), -1, -sum(r.size for r in revs)))
        for i in sorted(plan.new + plan.over):
            imported = batch.keys[i]
            newest = len(imported.history) - 1
            revs = [
                self._revision(
                    copy.deepcopy(r.item.record),
                    dict(r.item.scope),
                    plan.revisions[i] if j == newest else r.revision,
                    r.recorded_at,
                    record_size(r.item.record),
                )
                for j, r in enumerate(imported.history)
            ]
            store._keys[imported.key] = revs
            changes.append((tenant_of(revs[-1].scope), 1, sum(r.size for r in revs)))
        store._usage.apply(store._usage.after(changes))


def import_keys(
    store: InMemoryAffectStore,
    batch: ImportedKeys,
    on_conflict: OnConflict,
    revision: Callable[..., Any],
    *,
    allow_scope_change: bool = False,
) -> ImportOutcome:
    """Write ``batch``, each key with its whole history, under the store's lock, each
    revision as the store's ``revision`` (its row type). Raises ImportConflict,
    ImportScopeChange (nothing written)."""
    with store._lock:
        tx = _KeyTx(store, revision)
        return import_key_batch(tx, batch, on_conflict, allow_scope_change=allow_scope_change)
