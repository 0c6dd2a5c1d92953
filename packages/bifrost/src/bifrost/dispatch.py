"""Plane-independent pieces of dispatch: envelope coercion, argument-name checks,
the grant helpers that wrap a store, and the handshake."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from bifrost.context import DispatchContext
from bifrost.envelope import WIRE_VERSION, Envelope
from bifrost.errors import Forbidden, InvalidArguments, UnknownVerb
from bifrost.scope import DEFAULT_MAX_SCOPE_ANY, inside_grant, validate_record_scope

__all__ = [
    "VerbSpec",
    "check_args",
    "check_record_scopes",
    "coerce_envelope",
    "handshake_result",
    "max_scope_any",
    "record_scope_of",
    "require_inside",
    "safe_name",
]

_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")


def safe_name(name: str) -> str:
    """Echo an argument/verb name only when it looks like a schema identifier."""
    return repr(name) if _NAME.fullmatch(name) else "(unprintable)"


class VerbSpec:
    """Argument names a verb accepts and which of them are required."""

    def __init__(self, allowed: tuple[str, ...] = (), required: tuple[str, ...] = ()) -> None:
        self.allowed = frozenset(allowed)
        self.required = frozenset(required)


def coerce_envelope(envelope: Envelope | Mapping[str, Any]) -> Envelope:
    return envelope if isinstance(envelope, Envelope) else Envelope.from_dict(envelope)


def check_args(verb: str, args: dict[str, Any], specs: Mapping[str, VerbSpec]) -> dict[str, Any]:
    """Unknown verb → ``UnknownVerb``; unknown or missing arg names →
    ``InvalidArguments``."""
    spec = specs.get(verb)
    if spec is None:
        raise UnknownVerb(f"unknown verb {safe_name(verb)}")
    for name in args:
        if name not in spec.allowed:
            raise InvalidArguments(f"{verb}: unknown argument {safe_name(name)}")
    for name in sorted(spec.required):
        if name not in args:
            raise InvalidArguments(f"{verb}: missing argument {name!r}")
    return args


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
