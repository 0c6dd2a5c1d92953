"""``dispatch_memory_call``: transport-free dispatch of one memory envelope.

It routes the verb, checks argument names, applies the token's scope grant
around the (grant-agnostic) store, and returns the verb's result or raises a
``BifrostError``. Grant rules:

- ``upsert_many``: every record's scope must be inside the grant, and every id
  that already exists must be inside it too (else a writer could overwrite a
  chunk of another scope) → ``Forbidden``, store never asked to write.
- ``search``: the grant is ANDed into ``scope_all`` (a contradicting axis →
  ``Forbidden``); rows outside the grant are dropped again afterwards.
- ``get`` / ``get_many``: records outside the grant are reported absent.
- ``delete_many``: the ids are first read (``get_many``) and only those inside
  the grant are passed to the store. A record moved out of the grant between
  the read and the delete (by a concurrent upsert of another writer) can still
  be deleted: the window is one store round-trip and needs a writer that holds
  a wider grant.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from bifrost.context import DispatchContext
from bifrost.dispatch import (
    VerbSpec,
    check_args,
    check_record_scopes,
    coerce_envelope,
    handshake_result,
    max_scope_any,
    record_scope_of,
    require_inside,
)
from bifrost.envelope import Envelope
from bifrost.errors import UnsupportedVerb
from bifrost.memory.capabilities import GATED_VERB_CAPABILITY
from bifrost.memory.protocol import MemoryDataStore, ScopeLookup
from bifrost.memory.validation import record_id, validate_id, validate_records_common
from bifrost.scope import apply_grant, inside_grant, validate_scope

__all__ = ["MEMORY_VERBS", "dispatch_memory_call", "memory_handshake"]

_SPECS: dict[str, VerbSpec] = {
    "describe_store": VerbSpec(),
    "health": VerbSpec(),
    "upsert_many": VerbSpec(("records", "expected_revisions"), ("records",)),
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
    ),
    "get": VerbSpec(("chunk_id",), ("chunk_id",)),
    "get_many": VerbSpec(("ids",), ("ids",)),
    "delete_many": VerbSpec(("ids",), ("ids",)),
}
MEMORY_VERBS: tuple[str, ...] = tuple(_SPECS)


def _visible(record: Mapping[str, Any], grant: Mapping[str, str]) -> bool:
    return inside_grant(record_scope_of(record), grant)


def _visible_ids(store: MemoryDataStore, ids: list[str], grant: Mapping[str, str]) -> list[str]:
    """``ids`` the grant may see, decided from scopes alone when the store can tell them
    (:class:`ScopeLookup`), so out-of-grant ids cost what absent ids cost; else all of
    them (the records fetched are filtered afterwards)."""
    if not grant or not isinstance(store, ScopeLookup):
        return ids
    scopes = store.scopes_of(ids)
    return [i for i in ids if i in scopes and inside_grant(scopes[i], grant)]


def _upsert(store: MemoryDataStore, env: Envelope, ctx: DispatchContext) -> Any:
    args = env.args
    grant = ctx.scope
    if grant:
        records = validate_records_common(args["records"], max_batch=sys.maxsize)
        ids = [record_id(rec, i) for i, rec in enumerate(records)]
        check_record_scopes(records)
        require_inside(records, grant, "record")
        existing = store.get_many(ids) if ids else []
        require_inside(existing, grant, "existing record")
    return store.upsert_many(
        args["records"],
        idempotency_key=env.idempotency_key,  # type: ignore[arg-type]  # store validates
        ctx=ctx,
        expected_revisions=args.get("expected_revisions"),
        idempotency_class=env.idempotency_class,
    )


def _search(store: MemoryDataStore, args: dict[str, Any], ctx: DispatchContext) -> Any:
    scope_all, scope_any = validate_scope(
        args.get("scope_all"), args.get("scope_any"), max_any=max_scope_any(store)
    )
    merged = apply_grant(scope_all, ctx.scope)
    rows = store.search(
        args["vector"],
        top_k=args["top_k"],
        scope_all=merged,
        scope_any=scope_any,
        metadata_filter=args.get("metadata_filter"),
        include=args.get("include"),
        fidelity_target=args.get("fidelity_target"),
    )
    if ctx.scope:
        rows = [r for r in rows if _visible(r.get("chunk") or {}, ctx.scope)]
    return rows


def dispatch_memory_call(
    store: MemoryDataStore, envelope: Envelope | Mapping[str, Any], ctx: DispatchContext
) -> Any:
    """Dispatch one memory envelope (an :class:`Envelope` or its dict form).

    Raises ``MalformedEnvelope`` / ``UnsupportedWireVersion`` (dict envelopes),
    ``UnknownVerb``, ``UnsupportedVerb`` (gated verbs), ``InvalidArguments``,
    ``InvalidFilter``, ``Forbidden`` and whatever typed error the store raises.
    """
    env = coerce_envelope(envelope)
    verb = env.verb
    if verb in GATED_VERB_CAPABILITY:
        # No gated verb is implemented by this library version: answering
        # unsupported keeps advertise-implies-implement honest (see README).
        raise UnsupportedVerb(f"{verb} is not supported by this consumer")
    args = check_args(verb, env.args, _SPECS)
    grant = ctx.scope
    if verb == "describe_store":
        return store.describe_store()
    if verb == "health":
        return store.health()
    if verb == "upsert_many":
        return _upsert(store, env, ctx)
    if verb == "search":
        return _search(store, args, ctx)
    if verb == "get":
        chunk_id = args["chunk_id"]
        if grant and isinstance(store, ScopeLookup):
            validate_id(chunk_id, "chunk_id")  # the store's own message for a bad id
            if not _visible_ids(store, [chunk_id], grant):
                return None
        rec = store.get(chunk_id)
        return rec if rec is None or _visible(rec, grant) else None
    if verb == "get_many":
        ids = _visible_ids(store, args["ids"], grant)
        return [r for r in store.get_many(ids) if _visible(r, grant)] if ids else []
    # delete_many
    ids = args["ids"]
    if grant:
        if isinstance(store, ScopeLookup):
            ids = _visible_ids(store, ids, grant)
        else:
            ids = [record_id(r) for r in store.get_many(ids) if _visible(r, grant)]
    return store.delete_many(ids)


def memory_handshake(
    store: MemoryDataStore, envelope: Envelope | Mapping[str, Any], ctx: DispatchContext
) -> dict[str, Any]:
    """The ``handshake`` verb for the memory plane."""
    env = coerce_envelope(envelope)
    return handshake_result(
        env.args,
        ctx,
        plane="memory",
        verbs=list(MEMORY_VERBS),
        capabilities=store.describe_store(),
    )
