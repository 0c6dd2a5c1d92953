"""LangChain's dict ``filter`` as the memory plane's ``metadata_filter``.

A filter names metadata keys: ``{"kind": "note", "year": {"$gte": 2020}}`` becomes
``{"metadata.kind": "note", "metadata.year": {"$gte": 2020}}`` (the record keeps
metadata under ``metadata``, see :mod:`langchain_ratatoskr.records`). The operators
are the plane's: ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``, ``$in``,
``$nin``, ``$exists``; fields are ANDed, and ``{"$and": [f1, f2, …]}`` is merged into
one AND. The server must declare every field a filter names
(``RATATOSKR_MEMORY_FILTERABLE_FIELDS=metadata.kind,…``); an undeclared one is its
``InvalidFilter``. ``$or``, ``$not`` and other operators have no counterpart on the
plane: ValueError here, before anything is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["OPERATORS", "metadata_filter"]

OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists"})
"""The condition operators the memory plane evaluates."""

_FIELD_PREFIX = "metadata."


def metadata_filter(filter: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The plane's ``metadata_filter`` for a LangChain ``filter`` (None for none or
    ``{}``). Raises ValueError for an operator the plane lacks or a field given
    the same operator twice; TypeError for a filter that is not a dict."""
    if filter is None:
        return None
    out: dict[str, dict[str, Any]] = {}
    _merge(out, filter, "filter")
    return {_FIELD_PREFIX + field: cond for field, cond in out.items()} or None


def _merge(out: dict[str, dict[str, Any]], filter: object, where: str) -> None:
    if not isinstance(filter, Mapping):
        raise TypeError(f"{where} must be a dict of metadata keys, got {type(filter).__name__}")
    for field, cond in filter.items():
        if not isinstance(field, str) or not field:
            raise ValueError(f"{where}: metadata keys are non-empty strings")
        if field == "$and":
            if not isinstance(cond, list):
                raise ValueError(f"{where}.$and takes a list of filters")
            for i, part in enumerate(cond):
                _merge(out, part, f"{where}.$and[{i}]")
            continue
        if field.startswith("$"):
            raise ValueError(
                f"{where}: {field} has no counterpart on the memory plane (fields are "
                f"ANDed; the operators are {', '.join(sorted(OPERATORS))})"
            )
        ops = _condition(cond, f"{where}.{field}")
        have = out.setdefault(field, {})
        for op, value in ops.items():
            if op in have:
                raise ValueError(f"{where}: the key {field!r} is given {op} twice")
            have[op] = value


def _condition(cond: object, where: str) -> dict[str, Any]:
    """A condition as an operator dict: a scalar is ``{"$eq": scalar}``."""
    if not isinstance(cond, Mapping):
        return {"$eq": cond}
    if not cond:
        raise ValueError(f"{where}: an empty condition")
    for op in cond:
        if op not in OPERATORS:
            raise ValueError(
                f"{where}: {op!r} is not an operator of the memory plane "
                f"({', '.join(sorted(OPERATORS))})"
            )
    return dict(cond)
