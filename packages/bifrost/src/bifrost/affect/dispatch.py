"""``dispatch_affect_call``: transport-free dispatch of one affect envelope.

Grant rules (reads stay grant-agnostic in the store; writes and deletes decide
the grant in their transaction):
- ``put_many``: every record inside the grant, and every key that already
  exists inside it too → else ``Forbidden``, nothing written (decided by the
  store, ``AffectWrites``, after validating the whole batch; the existing keys'
  scopes inside its write transaction);
- ``get`` / ``get_many``: current records outside the grant look absent;
- ``history``: a key whose current record is outside the grant gives an empty
  page; revisions whose own scope is outside the grant are dropped from a page
  (so a page may hold fewer than ``limit`` items while a cursor is returned);
- ``list``: the grant is ANDed into ``scope_all`` (contradiction → ``Forbidden``);
- ``delete_many``: only keys whose current record lies inside the grant are
  erased and counted, decided inside the delete's transaction by a store built
  on :class:`~bifrost.affect.protocol.AffectReads`; any other store is guarded
  by reading the keys first (the window memory's module doc describes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bifrost.affect.protocol import AffectDataStore, AffectReads
from bifrost.affect.validation import validate_key
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
from bifrost.errors import InvalidArguments

__all__ = ["AFFECT_VERBS", "AFFECT_VERB_SPECS", "affect_handshake", "dispatch_affect_call"]


def _keys(records: list[dict[str, Any]]) -> list[str]:
    keys = []
    for i, rec in enumerate(records):
        if "key" not in rec:
            raise InvalidArguments(f"record {i}: missing key")
        keys.append(validate_key(rec["key"], f"record {i}: key"))
    return keys


def _put(store: AffectDataStore, env: Envelope, ctx: DispatchContext) -> Any:
    return guarded_write(store, env, ctx, ids_of=_keys, write="put_many")


def _get(store: AffectDataStore, env: Envelope, ctx: DispatchContext) -> Any:
    rec = store.get(env.args["key"])
    return rec if rec is None or visible(rec, ctx.scope) else None


def _get_many(store: AffectDataStore, env: Envelope, ctx: DispatchContext) -> Any:
    return [r for r in store.get_many(env.args["keys"]) if visible(r, ctx.scope)]


def _history(store: AffectDataStore, env: Envelope, ctx: DispatchContext) -> Any:
    args, grant = env.args, ctx.scope
    key, limit, before = args["key"], args.get("limit"), args.get("before_revision")
    if grant:
        current = store.get(key)
        if current is None or not visible(current, grant):
            # Validate the paging args anyway so errors do not depend on existence.
            store.history(key, limit=limit, before_revision=before)
            return {"items": [], "next_before_revision": None}
    return visible_items(store.history(key, limit=limit, before_revision=before), grant)


def _list(store: AffectDataStore, env: Envelope, ctx: DispatchContext) -> Any:
    args = env.args
    scope_all, scope_any = granted_scope(store, args, ctx.scope)
    page = store.list(
        scope_all=scope_all,
        scope_any=scope_any,
        limit=args.get("limit"),
        after_key=args.get("after_key"),
    )
    return visible_items(page, ctx.scope)


def _delete_many(store: AffectDataStore, env: Envelope, ctx: DispatchContext) -> Any:
    keys, grant = env.args["keys"], ctx.scope
    if isinstance(store, AffectReads):  # the grant decided in the delete's transaction
        return store.delete_many(keys, grant=grant)
    if grant:
        keys = [r["key"] for r in store.get_many(keys) if visible(r, grant)]
    return store.delete_many(keys)


AFFECT_VERB_SPECS: dict[str, VerbSpec] = {
    **BASE_VERBS,
    "put_many": VerbSpec(("records", "expected_revisions"), ("records",), run=_put),
    "get": VerbSpec(("key",), ("key",), run=_get),
    "get_many": VerbSpec(("keys",), ("keys",), run=_get_many),
    "history": VerbSpec(("key", "limit", "before_revision"), ("key",), run=_history),
    "list": VerbSpec(("scope_all", "scope_any", "limit", "after_key"), (), run=_list),
    "delete_many": VerbSpec(("keys",), ("keys",), run=_delete_many),
}
"""The affect plane's verbs: their argument names and the function that runs each."""
AFFECT_VERBS: tuple[str, ...] = tuple(AFFECT_VERB_SPECS)


def dispatch_affect_call(
    store: AffectDataStore, envelope: Envelope | Mapping[str, Any], ctx: DispatchContext
) -> Any:
    """Dispatch one affect envelope; raises like :func:`dispatch_memory_call`."""
    return dispatch_verb(store, envelope, ctx, AFFECT_VERB_SPECS)


def affect_handshake(
    store: AffectDataStore, envelope: Envelope | Mapping[str, Any], ctx: DispatchContext
) -> dict[str, Any]:
    """The ``handshake`` verb for the affect plane."""
    return plane_handshake(store, envelope, ctx, plane="affect", verbs=AFFECT_VERBS)
