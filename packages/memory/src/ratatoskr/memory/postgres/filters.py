"""A ``metadata_filter`` (:mod:`bifrost.memory.filters`) as a PostgreSQL predicate.

The predicate reads the record as ``jsonb`` (``d``: ``record_json::jsonb``, parsed
once per row by a ``LATERAL`` of the statement) and states bifrost's rules exactly:
types checked with ``jsonb_typeof`` before any cast (inside ``CASE``, so no cast of
another type is ever evaluated), numbers compared as ``numeric`` (an int and a float
by value; the operand written with Python's shortest round-trip ``repr``), strings
with ``COLLATE "C"`` (code-point order), arrays by any element for ``$eq``/``$in``,
a path through a non-object read as missing, and every comparison ``COALESCE``d to
false so that ``NOT`` gives ``$ne``/``$nin`` exactly. It sits in the statement's
``WHERE`` beside the scope, before ``ORDER BY … LIMIT``: the result is the exact
top_k (or page) of the filtered in-scope set. Values are rendered as literals
(psycopg escapes them); a string holding NUL matches nothing (jsonb cannot hold one).
"""

from __future__ import annotations

from typing import Any

from psycopg import sql

from bifrost.memory.filters import FieldCondition, MetadataFilter

__all__ = ["DOC_LATERAL", "filter_sql"]

# Joined to the scanned table: the record parsed once per row, as ``d.d``.
DOC_LATERAL = sql.SQL(", LATERAL (SELECT record_json::jsonb) AS d(d)")
_FALSE = sql.SQL("FALSE")


def _value(path: tuple[str, ...]) -> sql.Composable:
    """The value at ``path`` (SQL NULL when missing or behind a non-object)."""
    at = sql.SQL("(d.d #> {})").format(sql.Literal(list(path)))
    if len(path) == 1:
        return at
    guards = sql.SQL(" AND ").join(
        sql.SQL("jsonb_typeof(d.d #> {}) = 'object'").format(sql.Literal(list(path[:i])))
        for i in range(1, len(path))
    )
    return sql.SQL("(CASE WHEN {} THEN {} END)").format(guards, at)


def _number(x: int | float) -> sql.Composable:
    return sql.SQL("{}::numeric").format(sql.Literal(repr(x) if isinstance(x, float) else str(x)))


def _scalar_eq(v: sql.Composable, x: Any) -> sql.Composable:
    """``v`` (one JSON value) equal to the scalar ``x`` and of its type; NULL-safe."""
    if x is None:
        return sql.SQL("(jsonb_typeof({v}) = 'null')").format(v=v)
    if isinstance(x, bool):
        return sql.SQL("({v} = {lit}::jsonb)").format(
            v=v, lit=sql.Literal("true" if x else "false")
        )
    if isinstance(x, int | float):
        return sql.SQL(
            "(CASE WHEN jsonb_typeof({v}) = 'number' THEN ({v} #>> '{{}}')::numeric = {n} END)"
        ).format(v=v, n=_number(x))
    if "\x00" in x:
        return _FALSE
    return sql.SQL(
        "(CASE WHEN jsonb_typeof({v}) = 'string' THEN ({v} #>> '{{}}') = {s} END)"
    ).format(v=v, s=sql.Literal(x))


def _eq(v: sql.Composable, x: Any) -> sql.Composable:
    element = sql.SQL("e.v")
    return sql.SQL(
        "COALESCE({direct} OR EXISTS (SELECT 1 FROM jsonb_array_elements("
        "CASE WHEN jsonb_typeof({v}) = 'array' THEN {v} ELSE '[]'::jsonb END) AS e(v)"
        " WHERE {elem}), FALSE)"
    ).format(direct=_scalar_eq(v, x), v=v, elem=_scalar_eq(element, x))


_COMPARE = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def _range(v: sql.Composable, op: str, x: Any) -> sql.Composable:
    cmp = sql.SQL(_COMPARE[op])
    if isinstance(x, bool) or x is None:
        return _FALSE
    if isinstance(x, int | float):
        return sql.SQL(
            "COALESCE(CASE WHEN jsonb_typeof({v}) = 'number'"
            " THEN ({v} #>> '{{}}')::numeric {cmp} {n} END, FALSE)"
        ).format(v=v, cmp=cmp, n=_number(x))
    if "\x00" in x:
        # No stored string holds NUL: compare with its part before the NUL, which
        # orders just below the operand (equal to it never).
        head = x.split("\x00", 1)[0]
        cmp = sql.SQL({"$gt": ">", "$gte": ">", "$lt": "<=", "$lte": "<="}[op])
        x = head
    return sql.SQL(
        "COALESCE(CASE WHEN jsonb_typeof({v}) = 'string'"
        ' THEN ({v} #>> \'{{}}\') COLLATE "C" {cmp} {s} COLLATE "C" END, FALSE)'
    ).format(v=v, cmp=cmp, s=sql.Literal(x))


def _condition(cond: FieldCondition) -> sql.Composable:
    v = _value(cond.path)
    parts: list[sql.Composable] = []
    for op, operand in cond.ops:
        if op == "$eq":
            parts.append(_eq(v, operand))
        elif op == "$ne":
            parts.append(sql.SQL("NOT {}").format(_eq(v, operand)))
        elif op in ("$in", "$nin"):
            any_of = sql.SQL("({})").format(sql.SQL(" OR ").join(_eq(v, x) for x in operand))
            parts.append(any_of if op == "$in" else sql.SQL("NOT {}").format(any_of))
        elif op == "$exists":
            test = sql.SQL("NOT NULL" if operand else "NULL")
            parts.append(sql.SQL("({} IS {})").format(v, test))
        else:
            parts.append(_range(v, op, operand))
    return sql.SQL("({})").format(sql.SQL(" AND ").join(parts))


def filter_sql(mf: MetadataFilter) -> sql.Composable:
    """The predicate of ``mf`` over ``d.d`` (join :data:`DOC_LATERAL`)."""
    return sql.SQL(" AND ").join(_condition(c) for c in mf.conditions)
