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
- Numbers compare by exact value, ints with floats too (bifrost's rule: Python's).
  ``jsonb`` holds a float as the ``numeric`` of its shortest decimal, which beyond
  2**53 need not be its value (``1e+30`` is 10**30 there; the float is
  1000000000000000019884624838656), and it forgets whether a number was written as
  an int or a float. So where an operand sits between a float's shortest decimal
  and its value (:func:`_band`, a few numbers wide; only beyond 2**53), the rows in
  that band are judged again by the form the record's text wrote them in
  (``json`` keeps it: a float has a '.' or an exponent) and, for a float, by its
  ``float8`` value (numeric to float8 is correctly rounded). Everywhere else, and
  for every operand below 2**53, the predicate is the index's plain comparison.
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
import math
from decimal import Decimal
from typing import Any

from psycopg import sql

from bifrost.memory.filters import FieldCondition, MetadataFilter
from ratatoskr.memory.postgres.field_index import (
    is_array,
    json_value,
    literal,
    number,
    string,
    value,
)
from ratatoskr.postgres.text import to_db, utf8_encodable

__all__ = ["DOC_LATERAL", "filter_sql", "filtered_prepare"]

# Nothing to join: every term reads ``record_json`` itself (kept for the statements
# that still splice it in).
DOC_LATERAL = sql.SQL("")
_FALSE = sql.SQL("FALSE")
_COMPARE = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


_SAFE = 2**53  # every int within is a float, and every float's shortest decimal exact
_IS_FLOAT = sql.SQL("~ '[.eE]'")  # the text of a JSON number written as a float


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _json_scalar(x: Any) -> str | None:
    """``x`` as the JSON text of its stored form (None: no stored value equals it)."""
    if isinstance(x, str):
        return json.dumps(to_db(x)) if utf8_encodable(x) else None
    return json.dumps(x)  # None, bool, int, finite float (validated): JSON's own text


def _as_float(x: int | float) -> float | None:
    try:
        return float(x)
    except OverflowError:
        return None


def _equal_numbers(xs: tuple[Any, ...]) -> dict[Decimal, tuple[bool, bool]]:
    """The ``numeric`` values a stored number equal to one of the numbers ``xs`` can
    have in ``jsonb``, each with (an int written so equals one, a float does): an
    int's value, a float's shortest decimal and its exact value."""
    out: dict[Decimal, tuple[bool, bool]] = {}
    for x in xs:
        if abs(x) < _SAFE:
            out[Decimal(repr(x))] = (True, True)  # its JSON text: jsonb equality is exact
            continue
        g = _as_float(x)
        candidates = [Decimal(x)] + ([Decimal(repr(g)), Decimal(g)] if g is not None else [])
        for n in candidates:
            as_int = n == n.to_integral_value() and n == x
            f = float(n)  # inf beyond the floats
            as_float = math.isfinite(f) and f == x
            old = out.get(n, (False, False))
            out[n] = (old[0] or as_int, old[1] or as_float)
    return out


def _formed(v: sql.Composable, jv: sql.Composable, n: Decimal, is_float: bool) -> sql.Composable:
    """``v`` is the number ``n`` written as a float (``is_float``) or as an int, or an
    array holding one: equality on the index's key, then the text of the rows it
    finds (an element's ``numeric`` read only when it is a number)."""
    lit = literal(str(n))
    form = _IS_FLOAT if is_float else sql.SQL("!") + _IS_FLOAT
    element = sql.SQL(
        "EXISTS (SELECT 1 FROM json_array_elements({jv}) AS e(x) WHERE CASE WHEN"
        " json_typeof(e.x) = 'number' THEN (e.x::text)::numeric = {n}::numeric"
        " AND e.x::text {form} END)"
    ).format(jv=jv, n=lit, form=form)
    return sql.SQL(
        "(({v} = {n}::jsonb AND ({jv})::text {form})"
        " OR ({v} @> {n}::jsonb AND CASE WHEN {arr} THEN {element} END))"
    ).format(v=v, jv=jv, n=lit, form=form, arr=is_array(v), element=element)


def _any_of(path: tuple[str, ...], xs: tuple[Any, ...]) -> sql.Composable:
    """``$in`` of the scalars ``xs`` (``$eq`` is one): the value is one of them, or an
    array holding one. The record is parsed twice per row at most, whatever the
    number of values (once for the equality, once more for the array test); a big
    number the text of the record decides (:func:`_formed`) is read on the rows
    holding it only."""
    v = value(path)
    texts = [_json_scalar(t) for t in xs if not _is_number(t)]
    formed: list[sql.Composable] = []
    for n, (as_int, as_float) in _equal_numbers(tuple(filter(_is_number, xs))).items():
        if as_int and as_float:
            texts.append(str(n))
        elif as_int or as_float:
            formed.append(_formed(v, json_value(path), n, as_float))
    lits = [literal(t) for t in dict.fromkeys(texts) if t is not None]
    arms = list(formed)
    if len(lits) == 1:
        equal: sql.Composable = sql.SQL("{} = {}::jsonb").format(v, lits[0])
    elif lits:
        equal = sql.SQL("{} = ANY(ARRAY[{}]::jsonb[])").format(v, sql.SQL(", ").join(lits))
    if lits:
        held = sql.SQL(" OR ").join(sql.SQL("{} @> {}::jsonb").format(v, x) for x in lits)
        arms.insert(
            0,
            sql.SQL("{equal} OR ({arr} AND ({held}))").format(
                equal=equal, arr=is_array(v), held=held
            ),
        )
    if not arms:
        return _FALSE
    return sql.SQL("({})").format(sql.SQL(" OR ").join(arms))


def _none_of(path: tuple[str, ...], xs: tuple[Any, ...]) -> sql.Composable:
    return sql.SQL("NOT COALESCE({}, FALSE)").format(_any_of(path, xs))


def _band(x: int | float) -> tuple[Decimal, Decimal, float] | None:
    """Where comparing ``numeric`` values with ``x`` can be wrong: the float ``g``
    nearest ``x`` when its shortest decimal, its value and ``x`` are not one number,
    and the band ``[lo, hi]`` they span. Only a float ``g`` can be misread there (its
    ``numeric`` is the shortest decimal): a float written elsewhere is nearer another
    float than ``x``, so its decimal and its value sit on the same side of ``x``."""
    if abs(x) < _SAFE:
        return None
    g = _as_float(x)
    if g is None:
        return None  # beyond every float: each compares as its decimal does
    points = {Decimal(x), Decimal(repr(g)), Decimal(g)}
    return (min(points), max(points), g) if len(points) > 1 else None


def _number_range(path: tuple[str, ...], op: str, x: int | float) -> sql.Composable:
    n = number(path)
    cmp = sql.SQL(_COMPARE[op])
    band = _band(x)
    if band is None:  # the shortest decimal: a float written x reads as exactly it
        return sql.SQL("({} {} {}::numeric)").format(n, cmp, literal(repr(x)))
    exact = literal(str(Decimal(x)))
    lo, hi, g = band
    # A float in the band is judged as a float: its value is x's nearest float g (or
    # a neighbour, which compares with x as it does with g), and g with x as Python
    # compares them.
    at_g = {"$gt": g > x, "$gte": g >= x, "$lt": g < x, "$lte": g <= x}[op]
    as_float = sql.SQL(
        "CASE WHEN {n}::float8 = {g}::float8 THEN {at_g} ELSE {n}::float8 {cmp} {g}::float8 END"
    ).format(n=n, g=literal(repr(g)), at_g=sql.SQL("TRUE" if at_g else "FALSE"), cmp=cmp)
    inside = sql.SQL(
        "CASE WHEN ({jv})::text {is_float} THEN {as_float} ELSE {n} {cmp} {exact}::numeric END"
    ).format(jv=json_value(path), is_float=_IS_FLOAT, as_float=as_float, n=n, cmp=cmp, exact=exact)
    upward = op in ("$gt", "$gte")
    return sql.SQL(
        "({n} {outer} {edge}::numeric AND ({n} {beyond} {far}::numeric OR {inside}))"
    ).format(
        n=n,
        outer=sql.SQL(">=" if upward else "<="),
        edge=literal(str(lo if upward else hi)),
        beyond=sql.SQL(">" if upward else "<"),
        far=literal(str(hi if upward else lo)),
        inside=inside,
    )


def _range(path: tuple[str, ...], op: str, x: Any) -> sql.Composable:
    if isinstance(x, bool) or x is None:
        return _FALSE
    if isinstance(x, int | float):
        return _number_range(path, op, x)
    cmp = sql.SQL(_COMPARE[op])
    return sql.SQL('(({}) COLLATE "C" {} {})').format(string(path), cmp, literal(to_db(x)))


def _condition(cond: FieldCondition) -> sql.Composable:
    v = value(cond.path)
    parts: list[sql.Composable] = []
    for op, operand in cond.ops:
        if op == "$eq":
            parts.append(_any_of(cond.path, (operand,)))
        elif op == "$ne":
            parts.append(_none_of(cond.path, (operand,)))
        elif op == "$in":
            parts.append(_any_of(cond.path, operand))
        elif op == "$nin":
            parts.append(_none_of(cond.path, operand))
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
