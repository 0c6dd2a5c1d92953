"""Scopes as columns, and a scope filter as a SQL union of conjunctions.

A record's scope is held one column per lattice axis (NULL = the axis is
absent), each with a btree index, so a filter is plain SQL the planner can
answer from the indexes (BitmapAnd for a conjunction, BitmapOr for a union).
The rule is bifrost's ``matches_scope``:

    (scope_all empty ∨ record ⊇ scope_all) ∧ (scope_any empty ∨ ∃ m ∈ scope_any: record ⊇ m)

rewritten as the union over the members of ``scope_all ∪ m`` (members that
contradict ``scope_all`` dropped; just ``scope_all`` when ``scope_any`` is empty
or one of its members adds nothing to it — an empty member matches every
record). A NULL column never equals a value, so a record with scope ``{}``
matches only unfiltered searches, as the spec says.

*Bounds* let a filter use a partial index that holds only short values of an
axis (``WHERE octet_length(axis) <= N``: an index entry has a size limit). A
filter value that is itself at most ``N`` bytes stored gets the same predicate
added beside its equality — true of every row equal to it, so the result is
unchanged, and the planner can prove the partial index applies; a longer value
does not get it and is answered by the other indexes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from psycopg import sql

from bifrost.scope import SCOPE_LATTICE
from ratatoskr.postgres.arrays import BinaryArray, text_array
from ratatoskr.postgres.text import from_db, to_db, utf8_encodable

__all__ = [
    "AXIS_COLUMNS",
    "Bounds",
    "Conjunction",
    "FilterShape",
    "StatementCache",
    "conjunction_sql",
    "conjunctions",
    "filter_params",
    "filter_shape",
    "scope_arrays",
    "scope_column_definitions",
    "scope_column_list",
    "scope_columns",
    "scope_from_columns",
    "scope_sets",
    "scopes_by_key",
    "where_sql",
]

# "group" is an SQL keyword: its column is grp.
AXIS_COLUMNS: dict[str, str] = {
    "end_user": "end_user",
    "group": "grp",
    "tenant": "tenant",
    "agent_self": "agent_self",
}
if tuple(AXIS_COLUMNS) != SCOPE_LATTICE:  # pragma: no cover - a new axis needs a migration
    raise RuntimeError("the scope lattice changed: the PostgreSQL schema needs a column for it")


def scope_column_definitions() -> sql.Composed:
    """The scope's columns in a ``CREATE TABLE``: one nullable ``text COLLATE "C"``
    column per axis (NULL = the axis is absent; "C" so that values sort by code point)."""
    return sql.SQL(", ").join(
        sql.SQL('{} text COLLATE "C"').format(sql.Identifier(column))
        for column in AXIS_COLUMNS.values()
    )


def scope_column_list() -> sql.Composed:
    """The scope's columns, comma-separated, in lattice order (a ``SELECT`` or ``INSERT`` list)."""
    return sql.SQL(", ").join(map(sql.Identifier, AXIS_COLUMNS.values()))


def scope_sets() -> sql.Composed:
    """An upsert's ``DO UPDATE SET`` of the scope columns: each from ``EXCLUDED``."""
    return sql.SQL(", ").join(
        sql.SQL("{a} = EXCLUDED.{a}").format(a=sql.Identifier(a)) for a in AXIS_COLUMNS.values()
    )


Conjunction = dict[str, str]
# Which axes each conjunction constrains (and which of them carry a bound, marked
# "axis<="): the SQL of a filter depends on this alone, so a store renders each
# shape's statement once and binds the values.
FilterShape = tuple[tuple[str, ...], ...]
# Axis → the largest stored value (bytes UTF-8) a partial index of it holds.
Bounds = Mapping[str, int]


def scope_columns(scope: Mapping[str, str]) -> tuple[str | None, ...]:
    """A validated record scope as the stored axis columns, in lattice order."""
    return tuple(None if axis not in scope else to_db(scope[axis]) for axis in AXIS_COLUMNS)


def scope_from_columns(values: Sequence[Any]) -> dict[str, str]:
    """Inverse of :func:`scope_columns`."""
    return {
        axis: from_db(str(v)) for axis, v in zip(AXIS_COLUMNS, values, strict=True) if v is not None
    }


def scope_arrays(scopes: Sequence[Mapping[str, str]]) -> list[BinaryArray]:
    """Validated scopes as one ``text[]`` per axis column, in lattice order (the array
    parameters of a batch statement)."""
    rows = [scope_columns(s) for s in scopes]
    return [text_array([row[a] for row in rows]) for a in range(len(AXIS_COLUMNS))]


def scopes_by_key(
    rows: Iterable[Sequence[Any]], decode: Callable[[str], str] = str
) -> dict[str, dict[str, str]]:
    """``{key: scope}`` of rows ``(key, *scope columns)``, each key through ``decode``."""
    return {decode(str(r[0])): scope_from_columns(r[1:]) for r in rows}


class StatementCache:
    """Statements rendered once per filter shape, as bytes (they skip psycopg's
    composition on every call, and its parse cache keys on them); bounded, since a
    caller can make shapes without end."""

    def __init__(self, size: int = 128) -> None:
        self._size = size
        self._rendered: dict[FilterShape, bytes] = {}

    def get(self, shape: FilterShape) -> bytes | None:
        return self._rendered.get(shape)

    def put(self, shape: FilterShape, statement: sql.Composable) -> bytes:
        """``statement`` rendered, kept for ``shape``."""
        if len(self._rendered) >= self._size:
            self._rendered.clear()
        rendered = self._rendered[shape] = statement.as_bytes(None)
        return rendered


def conjunctions(
    scope_all: Mapping[str, str], scope_any: Sequence[Mapping[str, str]]
) -> list[Conjunction]:
    """The validated filter as a union of conjunctions; ``[]`` when nothing can match."""
    if not all(map(utf8_encodable, scope_all.values())):
        return []  # no stored value holds a lone surrogate (records refuse them)
    if not scope_any:
        return [dict(scope_all)]
    out: list[Conjunction] = []
    seen: set[frozenset[tuple[str, str]]] = set()
    for member in scope_any:
        if any(scope_all.get(axis, value) != value for axis, value in member.items()):
            continue  # contradicts scope_all
        if not all(map(utf8_encodable, member.values())):
            continue
        merged = {**scope_all, **member}
        if len(merged) == len(scope_all):
            return [dict(scope_all)]  # this member admits everything scope_all does
        frozen = frozenset(merged.items())
        if frozen not in seen:
            seen.add(frozen)
            out.append(merged)
    return out


def _within(axis: str, value: str, bounds: Bounds | None) -> bool:
    """Whether ``value`` of ``axis`` gets its bound's predicate (see the module docstring)."""
    if not bounds or axis not in bounds:
        return False
    return len(to_db(value).encode("utf-8")) <= bounds[axis]


def conjunction_sql(
    conj: Conjunction, alias: str | None = None, bounds: Bounds | None = None
) -> tuple[sql.Composable, list[str]]:
    """``axis = %s AND …`` (``TRUE`` for the empty conjunction) and its parameters;
    ``octet_length(axis) <= N`` beside each value within ``bounds``."""
    if not conj:
        return sql.SQL("TRUE"), []
    parts: list[sql.Composable] = []
    params: list[str] = []
    for axis, name in AXIS_COLUMNS.items():  # a fixed order: one prepared statement per shape
        if axis in conj:
            column = sql.Identifier(name) if alias is None else sql.Identifier(alias, name)
            parts.append(sql.SQL("{} = %s").format(column))
            params.append(to_db(conj[axis]))
            if bounds is not None and _within(axis, conj[axis], bounds):
                # A literal, as in the index's predicate: a parameter would hide it.
                parts.append(
                    sql.SQL("octet_length({}) <= {}").format(column, sql.Literal(bounds[axis]))
                )
    return sql.SQL(" AND ").join(parts), params


def filter_shape(conjs: Sequence[Conjunction], bounds: Bounds | None = None) -> FilterShape:
    """The shape of a union (the key of its rendered SQL)."""
    return tuple(
        tuple(
            f"{axis}<=" if _within(axis, conj[axis], bounds) else axis
            for axis in AXIS_COLUMNS
            if axis in conj
        )
        for conj in conjs
    )


def filter_params(conjs: Sequence[Conjunction]) -> list[str]:
    """The values of a union, in the order its SQL binds them."""
    return [to_db(conj[axis]) for conj in conjs for axis in AXIS_COLUMNS if axis in conj]


def where_sql(
    conjs: Sequence[Conjunction], bounds: Bounds | None = None
) -> tuple[sql.Composable, list[str]]:
    """The union of ``conjs`` as one boolean SQL expression and its parameters
    (``conjs`` must not be empty: the caller answers "nothing matches" itself)."""
    if not conjs:
        raise ValueError("an empty union matches nothing; do not query")
    if len(conjs) == 1:
        return conjunction_sql(conjs[0], bounds=bounds)
    parts: list[sql.Composable] = []
    params: list[str] = []
    for conj in conjs:
        text, values = conjunction_sql(conj, bounds=bounds)
        parts.append(sql.SQL("({})").format(text))
        params.extend(values)
    return sql.SQL(" OR ").join(parts), params
