"""Exact metadata filters (``metadata_filter`` of ``search`` and ``scan``): the rules of
memory-plane.md "Beyond v1", once — validation into a :class:`MetadataFilter` and a
pure-Python evaluator (:meth:`MetadataFilter.matches`) that the reference store runs
and every backend is held to.

A filter is ``{field: condition, …}`` over fields the operator declared (top-level
record keys, or dotted paths into nested objects), all ANDed. A condition is a JSON
scalar (equality) or an object of operators, ANDed. Values compare only within one
JSON type: numbers with numbers (int and float by value, bool is not a number),
strings with strings (code-point order), bools and null by equality only. ``$ne`` is
exactly the negation of ``$eq`` and ``$nin`` of ``$in``; a missing field (or a path
through a non-object) fails every condition but ``$ne``, ``$nin`` and
``$exists: false``; an array matches ``$eq``/``$in`` when an element does, and never
a range operator.

Error messages name a declared field or an operator, never a value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from bifrost.errors import InvalidArguments, InvalidFilter
from bifrost.fields import field_path
from bifrost.names import safe_name

__all__ = [
    "EQUALITY_OPS",
    "MAX_IN",
    "MISSING",
    "RANGE_OPS",
    "FieldCondition",
    "MetadataFilter",
    "condition_holds",
    "lookup",
    "same_scalar",
    "validate_filter",
]

MAX_IN = 256
RANGE_OPS: Final = frozenset({"$gt", "$gte", "$lt", "$lte"})
EQUALITY_OPS: Final = frozenset({"$eq", "$ne", "$in", "$nin", "$exists"})
_OPS: Final = RANGE_OPS | EQUALITY_OPS


class _Missing:
    """The value of a field a record does not have (a singleton)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


def lookup(record: Mapping[str, Any], path: Sequence[str]) -> Any:
    """The value at ``path`` in ``record``, or :data:`MISSING` (a part absent, or a
    path through something that is not an object)."""
    value: Any = record
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return MISSING
        value = value[part]
    return value


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def same_scalar(value: object, operand: object) -> bool:
    """``$eq`` of one non-array value: equal and of the same JSON type."""
    if operand is None:
        return value is None
    if isinstance(operand, bool):
        return isinstance(value, bool) and value is operand
    if _is_number(operand):
        return _is_number(value) and value == operand
    return isinstance(value, str) and value == operand


def _eq(value: object, operand: object) -> bool:
    if value is MISSING:
        return False
    if isinstance(value, list):
        return any(same_scalar(v, operand) for v in value)
    return same_scalar(value, operand)


def _in(value: object, operands: Sequence[object]) -> bool:
    return any(_eq(value, x) for x in operands)


def _range(value: object, op: str, operand: object) -> bool:
    if _is_number(operand):
        if not _is_number(value):
            return False
    elif isinstance(operand, str):
        if not isinstance(value, str):
            return False
    else:
        return False  # bool and null compare by equality only
    a: Any = value
    b: Any = operand
    if op == "$gt":
        return bool(a > b)
    if op == "$gte":
        return bool(a >= b)
    if op == "$lt":
        return bool(a < b)
    return bool(a <= b)


def condition_holds(value: object, op: str, operand: Any) -> bool:
    """Whether ``value`` (possibly :data:`MISSING`) passes one operator."""
    if op == "$eq":
        return _eq(value, operand)
    if op == "$ne":
        return not _eq(value, operand)
    if op == "$in":
        return _in(value, operand)
    if op == "$nin":
        return not _in(value, operand)
    if op == "$exists":
        return (value is not MISSING) is operand
    return _range(value, op, operand)


@dataclass(frozen=True)
class FieldCondition:
    """The validated condition on one declared field: ``ops`` ANDed."""

    field: str
    path: tuple[str, ...]
    ops: tuple[tuple[str, Any], ...]

    def holds(self, value: object) -> bool:
        return all(condition_holds(value, op, operand) for op, operand in self.ops)


@dataclass(frozen=True)
class MetadataFilter:
    """A validated filter: its conditions ANDed (never empty)."""

    conditions: tuple[FieldCondition, ...]

    def matches(self, record: Mapping[str, Any]) -> bool:
        """Whether ``record`` passes every condition (the oracle)."""
        return all(c.holds(lookup(record, c.path)) for c in self.conditions)

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(c.field for c in self.conditions)


def _scalar(value: object, what: str) -> object:
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidFilter(f"{what} must be a finite number")
        return value
    raise InvalidFilter(f"{what} must be a JSON scalar (string, number, bool or null)")


def _operators(field: str, condition: Mapping[Any, Any]) -> tuple[tuple[str, Any], ...]:
    if not condition:
        raise InvalidFilter(f"metadata_filter.{field}: an operator object must not be empty")
    ops: list[tuple[str, Any]] = []
    for op, operand in condition.items():
        if not isinstance(op, str) or op not in _OPS:
            raise InvalidFilter(
                f"metadata_filter.{field}: unknown operator {safe_name(str(op))}"
                " (use $eq $ne $gt $gte $lt $lte $in $nin $exists)"
            )
        what = f"metadata_filter.{field}.{op}"
        if op in ("$in", "$nin"):
            if not isinstance(operand, list) or not operand:
                raise InvalidFilter(f"{what} must be a non-empty list of scalars")
            if len(operand) > MAX_IN:
                raise InvalidFilter(f"{what} holds more than {MAX_IN} values")
            ops.append((op, tuple(_scalar(v, what) for v in operand)))
        elif op == "$exists":
            if not isinstance(operand, bool):
                raise InvalidFilter(f"{what} must be a boolean")
            ops.append((op, operand))
        else:
            ops.append((op, _scalar(operand, what)))
    return tuple(ops)


def validate_filter(value: object, declared: Sequence[str]) -> MetadataFilter | None:
    """A ``metadata_filter`` argument: None or ``{}`` → None (no filter). With no
    ``declared`` fields any other value is InvalidArguments (v1); else it must be an
    object over declared fields whose conditions follow the spec (InvalidFilter)."""
    if value is None or value == {}:
        return None
    if not declared:
        raise InvalidArguments("metadata_filter is not supported (no filterable fields)")
    if not isinstance(value, dict):
        raise InvalidFilter("metadata_filter must be an object")
    known = set(declared)
    conditions: list[FieldCondition] = []
    for field, condition in value.items():
        if not isinstance(field, str) or field not in known:
            raise InvalidFilter(
                f"metadata_filter names a field that is not filterable: {safe_name(str(field))}"
                " (see describe_store's filterable_metadata_fields)"
            )
        if isinstance(condition, dict):
            ops = _operators(field, condition)
        else:
            ops = (("$eq", _scalar(condition, f"metadata_filter.{field}")),)
        conditions.append(FieldCondition(field, field_path(field), ops))
    return MetadataFilter(tuple(conditions))
