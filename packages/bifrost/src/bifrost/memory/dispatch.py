"""``dispatch_memory_call``: transport-free dispatch of one memory envelope.

It routes the verb, checks argument names, applies the token's scope grant
around the (grant-agnostic) store, and returns the verb's result or raises a
``BifrostError``. Grant rules:

- ``upsert_many``: every record's scope must be inside the grant, and every id
  that already exists must be inside it too (else a writer could overwrite a
  chunk of another scope) → ``Forbidden``, nothing written. The store decides it
  (``MemoryWrites``): the whole batch validated first, then the records' own
  scopes, then — inside its write transaction — the stored scopes of the ids it
  would replace (:func:`bifrost.dispatch.guarded_write`).
- ``search``: the grant is ANDed into ``scope_all`` (a contradicting axis →
  ``Forbidden``); rows outside the grant are dropped again afterwards.
- ``scan``: as ``search`` (the grant ANDed into ``scope_all``, items outside it
  dropped again); a store without ``scan`` (:class:`MemoryScan`) answers
  ``UnsupportedVerb`` and its handshake does not list the verb.
- ``get`` / ``get_many``: records outside the grant are reported absent.
- ``delete_many``: only ids whose stored record lies inside the grant are
  deleted and counted (others look absent). A store built on
  :class:`~bifrost.memory.protocol.MemoryReads` decides it itself, inside its
  delete transaction (:func:`bifrost.writes.deletable` on the scopes read there,
  rows locked), so a record another tenant writes at the same moment is never
  lost to this delete. Any other store is guarded here, by reading the scopes
  first (``scopes_of`` / ``get_many``): a writer under another grant that
  recreates an id between that read and the delete loses its record, so such a
  store should decide the grant in its delete itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

from bifrost.context import DispatchContext
from bifrost.dispatch import (
    BASE_VERBS,
    VerbSpec,
    dispatch_verb,
    granted_scope,
    guarded_write,
    plane_handshake,
    visible,
    visible_items,
)
from bifrost.envelope import Envelope
from bifrost.errors import UnsupportedVerb
from bifrost.memory.capabilities import GATED_VERB_CAPABILITY
from bifrost.memory.protocol import MemoryDataStore, MemoryReads, MemoryScan, ScopeLookup
from bifrost.memory.validation import granted_search, record_id, validate_id
from bifrost.scope import inside_grant

__all__ = ["MEMORY_VERBS", "MEMORY_VERB_SPECS", "dispatch_memory_call", "memory_handshake"]


def _visible_ids(store: MemoryDataStore, ids: list[str], grant: Mapping[str, str]) -> list[str]:
    """``ids`` the grant may see, decided from scopes alone when the store can tell them
    (:class:`ScopeLookup`), so out-of-grant ids cost what absent ids cost; else all of
    them (the records fetched are filtered afterwards)."""
    if not grant or not isinstance(store, ScopeLookup):
        return ids
    scopes = store.scopes_of(ids)
    return [i for i in ids if i in scopes and inside_grant(scopes[i], grant)]


def _chunk_ids(records: list[dict[str, Any]]) -> list[str]:
    return [record_id(rec, i) for i, rec in enumerate(records)]


def _upsert(store: MemoryDataStore, env: Envelope, ctx: DispatchContext) -> Any:
    return guarded_write(store, env, ctx, ids_of=_chunk_ids, write="upsert_many")


def _plain_search(store: MemoryDataStore) -> TypeGuard[MemoryReads]:
    """Whether ``store`` searches as :class:`MemoryReads` does (validation, then
    ``perform_search``): dispatch then validates the call once itself, the grant
    included, and calls ``perform_search``. A store that overrides ``search`` is
    called through it."""
    return isinstance(store, MemoryReads) and type(store).search is MemoryReads.search


def _search(store: MemoryDataStore, env: Envelope, ctx: DispatchContext) -> Any:
    args = env.args
    if _plain_search(store):  # validated once, the grant ANDed in on the way
        query = granted_search(args, ctx.scope, **store.search_limits)
        return _visible_rows(store.perform_search(query), ctx.scope)
    scope_all, scope_any = granted_scope(store, args, ctx.scope)
    rows = store.search(
        args["vector"],
        top_k=args["top_k"],
        scope_all=scope_all,
        scope_any=scope_any,
        metadata_filter=args.get("metadata_filter"),
        include=args.get("include"),
        fidelity_target=args.get("fidelity_target"),
    )
    return _visible_rows(rows, ctx.scope)


def _visible_rows(rows: list[dict[str, Any]], grant: Mapping[str, str]) -> list[dict[str, Any]]:
    """The search rows whose chunk the grant may see (all of them without a grant)."""
    if not grant:
        return rows
    return [r for r in rows if visible(r.get("chunk") or {}, grant)]


def _scan(store: MemoryDataStore, env: Envelope, ctx: DispatchContext) -> Any:
    if not isinstance(store, MemoryScan):
        raise UnsupportedVerb("scan is not implemented by this store")
    args = env.args
    scope_all, scope_any = granted_scope(store, args, ctx.scope)
    page = store.scan(
        scope_all=scope_all,
        scope_any=scope_any,
        metadata_filter=args.get("metadata_filter"),
        limit=args.get("limit"),
        after_id=args.get("after_id"),
        include=args.get("include"),
    )
    return visible_items(page, ctx.scope)


def _get(store: MemoryDataStore, env: Envelope, ctx: DispatchContext) -> Any:
    chunk_id, grant = env.args["chunk_id"], ctx.scope
    if grant and isinstance(store, ScopeLookup):
        validate_id(chunk_id, "chunk_id")  # the store's own message for a bad id
        if not _visible_ids(store, [chunk_id], grant):
            return None
    rec = store.get(chunk_id)
    return rec if rec is None or visible(rec, grant) else None


def _get_many(store: MemoryDataStore, env: Envelope, ctx: DispatchContext) -> Any:
    grant = ctx.scope
    ids = _visible_ids(store, env.args["ids"], grant)
    return [r for r in store.get_many(ids) if visible(r, grant)] if ids else []


def _delete_many(store: MemoryDataStore, env: Envelope, ctx: DispatchContext) -> Any:
    ids, grant = env.args["ids"], ctx.scope
    if isinstance(store, MemoryReads):  # the grant decided in the delete's transaction
        return store.delete_many(ids, grant=grant)
    if grant:
        if isinstance(store, ScopeLookup):
            ids = _visible_ids(store, ids, grant)
        else:
            ids = [record_id(r) for r in store.get_many(ids) if visible(r, grant)]
    return store.delete_many(ids)


MEMORY_VERB_SPECS: dict[str, VerbSpec] = {
    **BASE_VERBS,
    "upsert_many": VerbSpec(("records", "expected_revisions"), ("records",), run=_upsert),
    "search": VerbSpec(
        (
            "vector",
            "top_k",
            "scope_all",
            "scope_any",
            "metadata_filter",
            "include",
            "fidelity_target",
        ),
        ("vector", "top_k"),
        run=_search,
    ),
    "scan": VerbSpec(
        ("scope_all", "scope_any", "metadata_filter", "limit", "after_id", "include"),
        (),
        run=_scan,
    ),
    "get": VerbSpec(("chunk_id",), ("chunk_id",), run=_get),
    "get_many": VerbSpec(("ids",), ("ids",), run=_get_many),
    "delete_many": VerbSpec(("ids",), ("ids",), run=_delete_many),
}
"""The memory plane's verbs: their argument names and the function that runs each."""
MEMORY_VERBS: tuple[str, ...] = tuple(MEMORY_VERB_SPECS)


def dispatch_memory_call(
    store: MemoryDataStore, envelope: Envelope | Mapping[str, Any], ctx: DispatchContext
) -> Any:
    """Dispatch one memory envelope (an :class:`Envelope` or its dict form).

    Raises ``MalformedEnvelope`` / ``UnsupportedWireVersion`` (dict envelopes),
    ``UnknownVerb``, ``UnsupportedVerb`` (gated verbs this library does not implement,
    and ``scan`` on a store without it: answering unsupported keeps
    advertise-implies-implement honest, see README), ``InvalidArguments``,
    ``InvalidFilter``, ``Forbidden`` and whatever typed error the store raises.
    """
    return dispatch_verb(store, envelope, ctx, MEMORY_VERB_SPECS, unsupported=GATED_VERB_CAPABILITY)


def memory_handshake(
    store: MemoryDataStore, envelope: Envelope | Mapping[str, Any], ctx: DispatchContext
) -> dict[str, Any]:
    """The ``handshake`` verb for the memory plane (``scan`` listed when the store
    implements it)."""
    verbs = [v for v in MEMORY_VERBS if v != "scan" or isinstance(store, MemoryScan)]
    return plane_handshake(store, envelope, ctx, plane="memory", verbs=verbs)
