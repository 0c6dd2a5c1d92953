"""``dispatch_affect_call``: transport-free dispatch of one affect envelope.

Grant rules (the store stays grant-agnostic):
- ``put_many``: every record inside the grant, and every key that already
  exists inside it too → else ``Forbidden``, nothing written;
- ``get`` / ``get_many``: current records outside the grant look absent;
- ``history``: a key whose current record is outside the grant gives an empty
  page; revisions whose own scope is outside the grant are dropped from a page
  (so a page may hold fewer than ``limit`` items while a cursor is returned);
- ``list``: the grant is ANDed into ``scope_all`` (contradiction → ``Forbidden``);
- ``delete_many``: keys are read first and only those inside the grant are
  passed to the store (same small race as memory's, see its module doc).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from bifrost.affect.protocol import AffectDataStore
from bifrost.affect.validation import validate_key
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
from bifrost.errors import InvalidArguments
from bifrost.memory.validation import validate_records_common
from bifrost.scope import apply_grant, inside_grant, validate_scope

__all__ = ["AFFECT_VERBS", "affect_handshake", "dispatch_affect_call"]

_SPECS: dict[str, VerbSpec] = {
    "describe_store": VerbSpec(),
    "health": VerbSpec(),
    "put_many": VerbSpec(("records", "expected_revisions"), ("records",)),
    "get": VerbSpec(("key",), ("key",)),
    "get_many": VerbSpec(("keys",), ("keys",)),
    "history": VerbSpec(("key", "limit", "before_revision"), ("key",)),
    "list": VerbSpec(("scope_all", "scope_any", "limit", "after_key"), ()),
    "delete_many": VerbSpec(("keys",), ("keys",)),
}
AFFECT_VERBS: tuple[str, ...] = tuple(_SPECS)


def _visible(record: Mapping[str, Any], grant: Mapping[str, str]) -> bool:
    return inside_grant(record_scope_of(record), grant)


def _put(store: AffectDataStore, env: Envelope, ctx: DispatchContext) -> Any:
    args = env.args
    grant = ctx.scope
    if grant:
        records = validate_records_common(args["records"], max_batch=sys.maxsize)
        keys = []
        for i, rec in enumerate(records):
            if "key" not in rec:
                raise InvalidArguments(f"record {i}: missing key")
            keys.append(validate_key(rec["key"], f"record {i}: key"))
        check_record_scopes(records)
        require_inside(records, grant, "record")
        existing = store.get_many(keys) if keys else []
        require_inside(existing, grant, "existing record")
    return store.put_many(
        args["records"],
        idempotency_key=env.idempotency_key,  # type: ignore[arg-type]  # store validates
        ctx=ctx,
        expected_revisions=args.get("expected_revisions"),
        idempotency_class=env.idempotency_class,
    )


def dispatch_affect_call(
    store: AffectDataStore, envelope: Envelope | Mapping[str, Any], ctx: DispatchContext
) -> Any:
    """Dispatch one affect envelope; raises like :func:`dispatch_memory_call`."""
    env = coerce_envelope(envelope)
    verb = env.verb
    args = check_args(verb, env.args, _SPECS)
    grant = ctx.scope
    if verb == "describe_store":
        return store.describe_store()
    if verb == "health":
        return store.health()
    if verb == "put_many":
        return _put(store, env, ctx)
    if verb == "get":
        rec = store.get(args["key"])
        return rec if rec is None or _visible(rec, grant) else None
    if verb == "get_many":
        return [r for r in store.get_many(args["keys"]) if _visible(r, grant)]
    if verb == "history":
        if grant:
            current = store.get(args["key"])
            if current is None or not _visible(current, grant):
                # Validate the paging args anyway so errors do not depend on existence.
                store.history(
                    args["key"],
                    limit=args.get("limit"),
                    before_revision=args.get("before_revision"),
                )
                return {"items": [], "next_before_revision": None}
        page: dict[str, Any] = store.history(
            args["key"], limit=args.get("limit"), before_revision=args.get("before_revision")
        )
        if grant:
            page = {**page, "items": [r for r in page["items"] if _visible(r, grant)]}
        return page
    if verb == "list":
        scope_all, scope_any = validate_scope(
            args.get("scope_all"), args.get("scope_any"), max_any=max_scope_any(store)
        )
        merged = apply_grant(scope_all, grant)
        result: dict[str, Any] = store.list(
            scope_all=merged,
            scope_any=scope_any,
            limit=args.get("limit"),
            after_key=args.get("after_key"),
        )
        if grant:
            result = {**result, "items": [r for r in result["items"] if _visible(r, grant)]}
        return result
    # delete_many
    keys = args["keys"]
    if grant:
        keys = [r["key"] for r in store.get_many(keys) if _visible(r, grant)]
    return store.delete_many(keys)


def affect_handshake(
    store: AffectDataStore, envelope: Envelope | Mapping[str, Any], ctx: DispatchContext
) -> dict[str, Any]:
    """The ``handshake`` verb for the affect plane."""
    env = coerce_envelope(envelope)
    return handshake_result(
        env.args, ctx, plane="affect", verbs=list(AFFECT_VERBS), capabilities=store.describe_store()
    )
