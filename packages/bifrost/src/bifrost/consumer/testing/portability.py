"""Export and import of the reference stores: what every backend's ``export_page``
and ``import_chunks`` / ``import_keys`` must do (:mod:`bifrost.portability`), in
dicts under the store's lock.

An export leaves out chunks expired under the store's retention, as every read
does. An import keeps each tenant's usage (:mod:`bifrost.quota`) as its records
count, but is not refused by a quota: it is an operator's action on the whole plane.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from bifrost.jsoncodec import canonical_json
from bifrost.memory.retention import is_expired
from bifrost.memory.validation import unit_vector
from bifrost.portability import (
    ExportedChunk,
    ExportedKey,
    Held,
    ImportedChunks,
    ImportedKeys,
    ImportOutcome,
    OnConflict,
    expired_entries,
    plan_import,
    same_history,
    same_record,
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
    items = batch.request.items
    ids = list(batch.request.ids)
    with store._lock:
        cutoff = store._cutoff()
        held = {cid: store._chunks[cid] for cid in ids if cid in store._chunks}
        plan = plan_import(
            ids,
            batch.revisions,
            {
                cid: Held(
                    same=c.revision >= batch.revisions[i]
                    and same_record(c.record, items[i].record),
                    revision=c.revision,
                    rescoped=c.scope != dict(items[i].scope),
                    expired=is_expired(c.written_at, cutoff),
                )
                for i, cid in enumerate(ids)
                if (c := held.get(cid)) is not None
            },
            on_conflict,
            expired=expired_entries(batch, cutoff),
            allow_scope_change=allow_scope_change,
        )
        over = plan.over
        sizes = batch.request.record_sizes()
        chosen = sorted(plan.new + over)
        store._usage.apply(
            store._usage.after(
                [(tenant_of(held[ids[i]].scope), -1, -held[ids[i]].size) for i in over]
                + [(tenant_of(items[i].scope), 1, sizes[i]) for i in chosen]
            )
        )
        for i in chosen:
            item = items[i]
            store._chunks[item.id] = chunk(
                copy.deepcopy(item.record),
                dict(item.scope),
                unit_vector(item.embedding),
                plan.revisions[i],
                sizes[i],
                batch.written_at[i],
            )
    return plan.outcome


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
    keys = [k.key for k in batch.keys]
    with store._lock:
        held: dict[str, Held] = {}
        for imported in batch.keys:
            revs = store._keys.get(imported.key)
            if revs is not None:
                held[imported.key] = Held(
                    same=same_history(
                        [(r.revision, _text(r.record), r.recorded_at) for r in revs],
                        [
                            (r.revision, _text(r.item.record), r.recorded_at)
                            for r in imported.history
                        ],
                    ),
                    revision=revs[-1].revision,
                    rescoped=revs[-1].scope != dict(imported.current.item.scope),
                )
        plan = plan_import(
            keys,
            [k.current.revision for k in batch.keys],
            held,
            on_conflict,
            allow_scope_change=allow_scope_change,
        )
        changes: list[tuple[str, int, int]] = []
        for i in plan.over:
            revs = store._keys.pop(keys[i])
            changes.append((tenant_of(revs[-1].scope), -1, -sum(r.size for r in revs)))
        for i in sorted(plan.new + plan.over):
            imported = batch.keys[i]
            newest = len(imported.history) - 1
            revs = [
                revision(
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
    return plan.outcome


def _text(record: Mapping[str, Any]) -> str:
    return canonical_json(dict(record)).decode("utf-8")
