"""The scope lattice, scope filter validation and matching, and grant rules.

A *scope* is a flat object of lattice axes to non-empty strings. A search
filters with ``scope_all`` (every axis must match: AND) and ``scope_any`` (a
list of conjunctive scopes, at least one must match: OR); the two compose by
AND and both empty match everything. A *grant* (``ctx.scope``) is a
conjunctive scope: a record is inside it when the record's scope carries
every axis of the grant with an equal value.

Error messages name the failing field or position, never a scope value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bifrost.errors import Forbidden, InvalidArguments, InvalidFilter
from bifrost.names import one_of, safe_name

__all__ = [
    "DEFAULT_MAX_SCOPE_ANY",
    "SCOPE_LATTICE",
    "apply_grant",
    "check_axes",
    "inside_grant",
    "matches_scope",
    "validate_record_scope",
    "validate_scope",
]

SCOPE_LATTICE: tuple[str, ...] = ("end_user", "group", "tenant", "agent_self")
_LATTICE = frozenset(SCOPE_LATTICE)
# Members a ``scope_any`` union may hold (``shared/spec/memory-plane.md``).
DEFAULT_MAX_SCOPE_ANY = 256


def _flat_scope(value: object, what: str) -> dict[str, str]:
    """Shape check only: a dict of str keys to non-empty str values."""
    if not isinstance(value, dict):
        raise InvalidArguments(f"{what} must be an object")
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str):
            raise InvalidArguments(f"{what} keys must be strings")
        if not isinstance(v, str) or not v:
            raise InvalidArguments(f"{what} values must be non-empty strings")
        out[k] = v
    return out


def _check_lattice(scope: Mapping[str, str], what: str, exc: type[Exception]) -> None:
    for k in scope:
        if k not in _LATTICE:
            # An axis is a schema word, not a value: it is named when it looks like one.
            raise exc(
                f"{what} has an axis outside the scope lattice: {safe_name(k)}"
                f"{one_of(k, SCOPE_LATTICE)}"
            )


def check_axes(scope: Mapping[str, object], what: str) -> None:
    """Every key of ``scope`` is a lattice axis, else ``InvalidArguments`` naming the
    first other one (a client checks its grant and filters with this before sending)."""
    _check_lattice({str(k): "" for k in scope}, what, InvalidArguments)


def validate_scope(
    scope_all: object, scope_any: object, *, max_any: int = DEFAULT_MAX_SCOPE_ANY
) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Validate a search/list scope filter.

    ``None`` means empty. ``scope_all`` must be a flat object and ``scope_any``
    a list of at most ``max_any`` flat objects (else ``InvalidArguments``: a
    huge union slows every call, see docs/decisions.md), values non-empty
    strings (else ``InvalidArguments``); any axis outside :data:`SCOPE_LATTICE`
    → ``InvalidFilter``. Shape is checked over both fields before the lattice.
    An empty member of ``scope_any`` (``{}``) matches every record.
    """
    all_ = {} if scope_all is None else _flat_scope(scope_all, "scope_all")
    any_: list[dict[str, str]] = []
    if scope_any is not None:
        if not isinstance(scope_any, list):
            raise InvalidArguments("scope_any must be a list of objects")
        if len(scope_any) > max_any:
            raise InvalidArguments(
                f"scope_any holds more than {max_any} members (RATATOSKR_MAX_SCOPE_ANY)"
            )
        for i, member in enumerate(scope_any):
            any_.append(_flat_scope(member, f"scope_any[{i}]"))
    _check_lattice(all_, "scope_all", InvalidFilter)
    for i, member in enumerate(any_):
        _check_lattice(member, f"scope_any[{i}]", InvalidFilter)
    return all_, any_


def validate_record_scope(scope: object, what: str = "scope") -> dict[str, str]:
    """A record's (or a grant's) scope: a flat object of lattice axes to non-empty
    strings; ``{}`` allowed. Anything else → ``InvalidArguments``."""
    out = _flat_scope(scope, what)
    _check_lattice(out, what, InvalidArguments)
    return out


def _contains(record_scope: Mapping[str, Any], conj: Mapping[str, str]) -> bool:
    """Every pair of ``conj`` is in ``record_scope`` (an items view's subset test: one
    C-level pass, values compared with ``==``, never hashed)."""
    return conj.items() <= record_scope.items()


def matches_scope(
    record_scope: Mapping[str, Any],
    scope_all: Mapping[str, str] | None,
    scope_any: list[dict[str, str]] | None,
) -> bool:
    """``(scope_all empty OR record ⊇ scope_all) AND (scope_any empty OR record ⊇ some member)``."""
    if scope_all and not _contains(record_scope, scope_all):
        return False
    return not scope_any or any(_contains(record_scope, m) for m in scope_any)


def inside_grant(record_scope: Mapping[str, Any] | None, grant: Mapping[str, str]) -> bool:
    """True when the record's scope carries every axis of the grant with an equal value."""
    return _contains(record_scope or {}, grant)


def apply_grant(scope_all: Mapping[str, str], grant: Mapping[str, str]) -> dict[str, str]:
    """AND the grant into ``scope_all``; an axis of ``scope_all`` contradicting the
    grant → ``Forbidden`` (the request reaches outside the grant)."""
    merged = dict(scope_all)
    for k, v in grant.items():
        if k in merged and merged[k] != v:
            raise Forbidden("scope_all reaches outside the token's scope grant")
        merged[k] = v
    return merged
