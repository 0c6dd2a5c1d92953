"""The dispatch skeleton every plane shares: a verb table (:class:`VerbSpec`: the
argument names a verb takes and the function that runs it), :func:`dispatch_verb`
that routes one envelope through such a table, the grant helpers that wrap a
(grant-agnostic) store, the guarded batch write, and the handshake.

A plane's own dispatch module holds only its verb table and the verbs whose grant
rules are its own (memory's ``search``, affect's ``history``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bifrost import names
from bifrost.context import DispatchContext
from bifrost.envelope import WIRE_VERSION, Envelope
from bifrost.errors import Forbidden, InvalidArguments, UnknownVerb, UnsupportedVerb
from bifrost.records import validate_records_common
from bifrost.scope import (
    DEFAULT_MAX_SCOPE_ANY,
    apply_grant,
    inside_grant,
    validate_record_scope,
    validate_scope,
)

__all__ = [
    "BASE_VERBS",
    "Handler",
    "VerbSpec",
    "check_args",
    "check_record_scopes",
    "coerce_envelope",
    "describe_store_verb",
    "dispatch_verb",
    "granted_scope",
    "guarded_write",
    "handshake_result",
    "health_verb",
    "max_scope_any",
    "plane_handshake",
    "record_scope_of",
    "require_inside",
    "safe_name",
    "visible",
    "visible_items",
]

Handler = Callable[[Any, Envelope, DispatchContext], Any]
"""Runs one verb: ``(store, envelope, ctx) -> result`` (argument names already checked)."""


def safe_name(name: str) -> str:
    """Echo an argument/verb name only when it looks like a schema identifier."""
    return names.safe_name(name)


@dataclass(frozen=True, init=False)
class VerbSpec:
    """One verb of a plane: the argument names it accepts, which of them are
    required, and the :data:`Handler` that runs it."""

    allowed: frozenset[str]
    required: frozenset[str]
    run: Handler

    def __init__(
        self,
        allowed: tuple[str, ...] = (),
        required: tuple[str, ...] = (),
        *,
        run: Handler,
    ) -> None:
        object.__setattr__(self, "allowed", frozenset(allowed))
        object.__setattr__(self, "required", frozenset(required))
        object.__setattr__(self, "run", run)


def coerce_envelope(envelope: Envelope | Mapping[str, Any]) -> Envelope:
    return envelope if isinstance(envelope, Envelope) else Envelope.from_dict(envelope)


def check_args(verb: str, args: dict[str, Any], specs: Mapping[str, VerbSpec]) -> dict[str, Any]:
    """Unknown verb → ``UnknownVerb``; unknown or missing arg names →
    ``InvalidArguments``."""
    spec = specs.get(verb)
    if spec is None:
        raise UnknownVerb(f"unknown verb {safe_name(verb)}{names.one_of(verb, specs)}")
    for name in args:
        if name not in spec.allowed:
            allowed = names.one_of(name, sorted(spec.allowed))
            raise InvalidArguments(f"{verb}: unknown argument {safe_name(name)}{allowed}")
    for name in sorted(spec.required):
        if name not in args:
            raise InvalidArguments(f"{verb}: missing argument {name!r}")
    return args


def dispatch_verb(
    store: Any,
    envelope: Envelope | Mapping[str, Any],
    ctx: DispatchContext,
    verbs: Mapping[str, VerbSpec],
    *,
    unsupported: Collection[str] = (),
) -> Any:
    """Route one envelope through a plane's verb table: a verb in ``unsupported`` →
    ``UnsupportedVerb`` (whatever its arguments), then :func:`check_args`, then the
    verb's handler. Raises what those and the handler raise."""
    env = coerce_envelope(envelope)
    verb = env.verb
    if verb in unsupported:
        raise UnsupportedVerb(f"{verb} is not supported by this consumer")
    check_args(verb, env.args, verbs)
    return verbs[verb].run(store, env, ctx)


def describe_store_verb(store: Any, env: Envelope, ctx: DispatchContext) -> Any:
    """``describe_store``: the store's capabilities, as it reports them."""
    return store.describe_store()


def health_verb(store: Any, env: Envelope, ctx: DispatchContext) -> Any:
    """``health``: the store's health answer."""
    return store.health()


BASE_VERBS: Mapping[str, VerbSpec] = {
    "describe_store": VerbSpec(run=describe_store_verb),
    "health": VerbSpec(run=health_verb),
}
"""The verbs every plane has, first in its table: ``describe_store`` and ``health``."""


def granted_scope(
    store: object, args: Mapping[str, Any], grant: Mapping[str, str]
) -> tuple[dict[str, str], list[dict[str, str]]]:
    """``(scope_all, scope_any)`` of a filtering verb's arguments, validated (with the
    store's ``scope_any`` cap) and with the grant ANDed into ``scope_all``
    (``InvalidFilter``, ``Forbidden`` on a contradicting axis)."""
    scope_all, scope_any = validate_scope(
        args.get("scope_all"), args.get("scope_any"), max_any=max_scope_any(store)
    )
    return apply_grant(scope_all, grant), scope_any


def record_scope_of(record: Mapping[str, Any]) -> Mapping[str, Any]:
    scope = record.get("scope")
    return scope if isinstance(scope, Mapping) else {}


def check_record_scopes(records: list[dict[str, Any]]) -> None:
    """Every record carries a valid ``scope`` (``InvalidArguments`` otherwise)."""
    for i, rec in enumerate(records):
        if "scope" not in rec:
            raise InvalidArguments(f"record {i}: missing scope (use {{}} for unscoped)")
        validate_record_scope(rec["scope"], f"record {i}: scope")


def require_inside(
    records: Sequence[Mapping[str, Any]], grant: Mapping[str, str], what: str
) -> None:
    for i, rec in enumerate(records):
        if not inside_grant(record_scope_of(rec), grant):
            raise Forbidden(f"{what} {i} lies outside the token's scope grant")


def visible(record: Mapping[str, Any], grant: Mapping[str, str]) -> bool:
    """Whether the grant may see ``record`` (its ``scope`` inside the grant)."""
    return inside_grant(record_scope_of(record), grant)


def visible_items(page: dict[str, Any], grant: Mapping[str, str]) -> dict[str, Any]:
    """``page`` with the ``items`` the grant may not see dropped (unchanged without a grant)."""
    if not grant:
        return page
    return {**page, "items": [r for r in page["items"] if visible(r, grant)]}


def guarded_write(
    store: Any,
    env: Envelope,
    ctx: DispatchContext,
    *,
    ids_of: Callable[[list[dict[str, Any]]], list[str]],
    write: str,
) -> Any:
    """A batch write under the token's grant: ``store.<write>`` with the grant in
    ``ctx``.

    A store built on ``bifrost.memory.MemoryWrites`` / ``bifrost.affect.AffectWrites``
    (``write_grant_in_transaction``) decides the grant itself, once, after validating
    the whole batch: its records' own scopes first, then — inside the write's
    transaction, where no other writer can come between the read and the write — the
    scopes of the records it would replace (``Forbidden``, nothing written). Nothing
    is read or validated here, so a malformed batch gets the same error whether its
    ids exist in another tenant or not.

    Any other store is guarded here, before it is called: every record's scope and
    the stored scope of every record its id already names (read with the store's
    ``scopes_of`` when it has one, else from ``get_many``) must lie inside the grant.
    That read is not in the store's transaction (a concurrent writer under another
    grant can create the id in between), so such a store should check the grant in
    its write itself. ``ids_of`` reads the ids of the records (raising
    ``InvalidArguments`` for a record without a valid one).
    """
    args = env.args
    grant = ctx.scope
    if grant and not getattr(store, "write_grant_in_transaction", False):
        records = validate_records_common(args["records"], max_batch=sys.maxsize)
        ids = ids_of(records)
        check_record_scopes(records)
        require_inside(records, grant, "record")
        if ids:
            _require_existing_inside(ids, _stored_scopes(store, ids, ids_of), grant)
    return getattr(store, write)(
        args["records"],
        idempotency_key=env.idempotency_key,  # store validates
        ctx=ctx,
        expected_revisions=args.get("expected_revisions"),
        idempotency_class=env.idempotency_class,
    )


def _stored_scopes(
    store: Any, ids: list[str], ids_of: Callable[[list[dict[str, Any]]], list[str]]
) -> Mapping[str, Mapping[str, Any]]:
    """``{id: stored scope}`` of the ``ids`` that exist: from the scopes alone when the
    store can tell them (``scopes_of``), else from the records ``get_many`` returns."""
    scopes_of = getattr(store, "scopes_of", None)
    if callable(scopes_of):
        found: Mapping[str, Mapping[str, Any]] = scopes_of(ids)
        return found
    existing = store.get_many(ids)
    return dict(zip(ids_of(existing), map(record_scope_of, existing), strict=True))


def _require_existing_inside(
    ids: Sequence[str], scopes: Mapping[str, Mapping[str, Any]], grant: Mapping[str, str]
) -> None:
    """Every id of ``ids`` that has a stored scope in ``scopes`` lies inside ``grant``;
    ``Forbidden`` names the first other one by its batch index."""
    for i, rid in enumerate(ids):
        if rid in scopes and not inside_grant(scopes[rid], grant):
            raise Forbidden(f"existing record {i} lies outside the token's scope grant")


def plane_handshake(
    store: Any,
    envelope: Envelope | Mapping[str, Any],
    ctx: DispatchContext,
    *,
    plane: str,
    verbs: Collection[str],
) -> dict[str, Any]:
    """The ``handshake`` verb of ``plane``: its verbs and the store's capabilities."""
    env = coerce_envelope(envelope)
    return handshake_result(
        env.args, ctx, plane=plane, verbs=list(verbs), capabilities=store.describe_store()
    )


def handshake_result(
    args: Mapping[str, Any],
    ctx: DispatchContext,
    *,
    plane: str,
    verbs: list[str],
    capabilities: dict[str, Any],
) -> dict[str, Any]:
    """The handshake: args ``{"plane"?, "client"?}`` (plane, when given, must be
    this app's plane; ``client`` an object, never logged)."""
    extra = set(args) - {"plane", "client"}
    if extra:
        raise InvalidArguments("handshake: unknown argument")
    if "plane" in args and args["plane"] != plane:
        raise InvalidArguments(f"handshake: this endpoint serves the {plane} plane")
    if "client" in args and not isinstance(args["client"], dict):
        raise InvalidArguments("handshake: client must be an object")
    return {
        "wire_version": WIRE_VERSION,
        "plane": plane,
        "consumer_id": ctx.consumer_id,
        "verbs": list(verbs),
        "capabilities": capabilities,
    }


def max_scope_any(store: object) -> int:
    """The ``scope_any`` cap of ``store`` (its ``max_scope_any`` attribute when it has
    one, else the spec's default): the library applies it before the store is called."""
    value = getattr(store, "max_scope_any", DEFAULT_MAX_SCOPE_ANY)
    return (
        value if isinstance(value, int) and not isinstance(value, bool) else DEFAULT_MAX_SCOPE_ANY
    )
