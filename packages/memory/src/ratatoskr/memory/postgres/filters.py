"""A ``metadata_filter`` (:mod:`bifrost.memory.filters`) as a PostgreSQL predicate.

Every term reads a field through the expressions of
:mod:`ratatoskr.memory.postgres.field_index` — the keys of the declared fields'
indexes — so the planner narrows the candidate rows by an index where the filter is
selective (and by the scope's where it is not), and each term is itself exact: no
post-filter re-checks a looser one.

- ``$eq`` of a scalar ``x`` is ``value = x OR (value is an array AND value @> x)``:
  ``jsonb`` equality holds exactly when the value is ``x`` with its JSON type
  (numbers as ``numeric``, by value; strings byte for byte), and containment of a
  scalar in an array exactly when an element (not nested deeper) is — bifrost's
  rule. The first arm is the field's btree, the second its partial GIN over arrays
  (a BitmapOr; the btree's rows need no recheck). ``$in`` is the same with
  ``= ANY(…)`` and an ``OR`` of containments. A missing value is NULL there, which
  ``WHERE`` reads as no match.
- ``$ne``/``$nin`` are ``NOT COALESCE(…, FALSE)`` of the same, so a missing value
  passes them.
- The range operators compare :func:`~ratatoskr.memory.postgres.field_index.number`
  or ``string`` (``COLLATE "C"``: code-point order) with the operand (the btree
  indexes' keys); a value of another type, an array or a missing one is NULL: no
  match. A bool or null operand matches nothing.
- Strings are compared in the stored form of ``ratatoskr.postgres.text`` on both
  sides (NUL and U+0001 escaped, order kept), so values holding NUL compare exactly.
  A string that UTF-8 cannot encode (a lone surrogate) equals no stored value; as a
  range operand it is refused by the driver, as before.

The predicate sits in the statement's ``WHERE`` beside the scope (its parts must
stay top-level ``AND`` terms of a ``WHERE``: NULL is read as false), before
``ORDER BY … LIMIT``: the result is the exact top_k (or page) of the filtered
in-scope set. Values are rendered as literals (psycopg escapes them).
"""

from __future__ import annotations

import json
from typing import Any

from psycopg import sql

from bifrost.memory.filters import FieldCondition, MetadataFilter
from ratatoskr.memory.postgres.field_index import is_array, literal, number, string, value
from ratatoskr.postgres.text import to_db, utf8_encodable

__all__ = ["DOC_LATERAL", "filter_sql", "filtered_prepare"]

# Nothing to join: every term reads ``record_json`` itself (kept for the statements
# that still splice it in).
DOC_LATERAL = sql.SQL("")
_FALSE = sql.SQL("FALSE")
_COMPARE = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def _json_scalar(x: Any) -> str | None:
    """``x`` as the JSON text of its stored form (None: no stored value equals it)."""
    if isinstance(x, str):
        return json.dumps(to_db(x)) if utf8_encodable(x) else None
    return json.dumps(x)  # None, bool, int, finite float (validated): JSON's own text


def _any_of(v: sql.Composable, xs: tuple[Any, ...]) -> sql.Composable:
    """``$in`` of the scalars ``xs`` (``$eq`` is one): the value is one of them, or an
    array holding one. The record is parsed twice per row at most, whatever the
    number of values (once for the equality, once more for the array test)."""
    lits = [literal(t) for t in dict.fromkeys(map(_json_scalar, xs)) if t is not None]
    if not lits:
        return _FALSE
    if len(lits) == 1:
        equal = sql.SQL("{} = {}::jsonb").format(v, lits[0])
    else:
        equal = sql.SQL("{} = ANY(ARRAY[{}]::jsonb[])").format(v, sql.SQL(", ").join(lits))
    held = sql.SQL(" OR ").join(sql.SQL("{} @> {}::jsonb").format(v, x) for x in lits)
    return sql.SQL("({equal} OR ({arr} AND ({held})))").format(
        equal=equal, arr=is_array(v), held=held
    )


def _none_of(v: sql.Composable, xs: tuple[Any, ...]) -> sql.Composable:
    return sql.SQL("NOT COALESCE({}, FALSE)").format(_any_of(v, xs))


def _range(path: tuple[str, ...], op: str, x: Any) -> sql.Composable:
    cmp = sql.SQL(_COMPARE[op])
    if isinstance(x, bool) or x is None:
        return _FALSE
    if isinstance(x, int | float):
        n = repr(x) if isinstance(x, float) else str(x)
        return sql.SQL("({} {} {}::numeric)").format(number(path), cmp, literal(n))
    return sql.SQL('(({}) COLLATE "C" {} {})').format(string(path), cmp, literal(to_db(x)))


def _condition(cond: FieldCondition) -> sql.Composable:
    v = value(cond.path)
    parts: list[sql.Composable] = []
    for op, operand in cond.ops:
        if op == "$eq":
            parts.append(_any_of(v, (operand,)))
        elif op == "$ne":
            parts.append(_none_of(v, (operand,)))
        elif op == "$in":
            parts.append(_any_of(v, operand))
        elif op == "$nin":
            parts.append(_none_of(v, operand))
        elif op == "$exists":
            parts.append(
                sql.SQL("({} IS {})").format(v, sql.SQL("NOT NULL" if operand else "NULL"))
            )
        else:
            parts.append(_range(cond.path, op, operand))
    return sql.SQL(" AND ").join(parts)


def filter_sql(mf: MetadataFilter) -> sql.Composable:
    """The predicate of ``mf`` over the scanned table's ``record_json`` (a ``WHERE``
    conjunction)."""
    return sql.SQL("({})").format(sql.SQL(" AND ").join(_condition(c) for c in mf.conditions))


def filtered_prepare(mf: MetadataFilter | None) -> bool | None:
    """psycopg's ``prepare`` for a statement holding ``mf``: False (planned on every
    call, with the parameters' values) when there is a filter, else None (psycopg's
    default: prepared once used often). A filter's literals make its statement one of
    many, so a prepared one is rarely reused, and its generic plan knows neither the
    scope nor the retention cutoff: measured at 100k rows, it added the
    ``updated_at`` index over the whole table to the filter's BitmapAnd (twice the
    time of the plan made for the values)."""
    return None if mf is None else False
