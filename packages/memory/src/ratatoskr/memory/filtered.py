"""Row-aligned columns of the declared filterable fields, beside the vector index.

The in-process index (:mod:`ratatoskr.memory.index`) narrows a search to the rows
of the selected scope classes; a ``metadata_filter`` narrows those rows further
*before* any vector is scanned, so the exact top_k of the filtered set costs what a
scope of the same size costs, at any selectivity. Each declared field keeps, per
row, a typed form of its value, moved with the row's codes:

- ``kind``: missing, null, false, true, number, string, or "python" (an array, an
  object, or an int no float64 holds exactly);
- ``num``: the number as float64; ``code``: the string's code in the field's
  intern table (strings compare by code for equality, by rank — code-point order,
  recomputed when a new string arrived — for ranges);
- ``obj``: the value itself for "python" rows, judged by the oracle
  (:meth:`bifrost.memory.filters.FieldCondition.holds`), one row at a time.

The semantics are bifrost's (:mod:`bifrost.memory.filters`); this module is their
vectorised form over the scalar kinds, held to the oracle by the conformance kit.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from bifrost.fields import field_path
from bifrost.memory.filters import MISSING, FieldCondition, MetadataFilter, lookup

__all__ = ["FilterColumns"]

Rows = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

_MISSING, _NULL, _FALSE, _TRUE, _NUM, _STR, _PY = range(7)


class _Field:
    """The intern table of one field's strings and its rank cache."""

    __slots__ = ("codes", "path", "rank_of", "sorted", "strings")

    def __init__(self, path: tuple[str, ...]) -> None:
        self.path = path
        self.codes: dict[str, int] = {}
        self.strings: list[str] = []
        self.sorted: list[str] = []
        self.rank_of: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)

    def intern(self, value: str) -> int:
        code = self.codes.get(value)
        if code is None:
            code = self.codes[value] = len(self.strings)
            self.strings.append(value)
        return code

    def ranks(self) -> tuple[list[str], npt.NDArray[np.int64]]:
        """The distinct strings in code-point order and each code's rank among them."""
        if len(self.sorted) != len(self.strings):
            self.sorted = sorted(self.strings)
            position = {s: i for i, s in enumerate(self.sorted)}
            self.rank_of = np.fromiter(
                (position[s] for s in self.strings), dtype=np.int64, count=len(self.strings)
            )
        return self.sorted, self.rank_of


def _exact_float(value: int) -> float | None:
    try:
        f = float(value)
    except OverflowError:
        return None
    return f if f == value else None


class _Slice(NamedTuple):
    """One field's columns at the rows a condition is evaluated on."""

    kind: npt.NDArray[np.int8]
    num: npt.NDArray[np.float64]
    code: npt.NDArray[np.int32]


class FilterColumns:
    """The typed columns of ``fields`` over ``cap`` rows (empty without fields)."""

    def __init__(self, fields: Sequence[str]) -> None:
        self.fields = tuple(fields)
        self._meta = {f: _Field(field_path(f)) for f in self.fields}
        self.arrays: list[npt.NDArray[Any]] = []

    def __bool__(self) -> bool:
        return bool(self.fields)

    def allocate(self, cap: int) -> None:
        """Fresh, all-missing columns of ``cap`` rows (the old ones are dropped)."""
        self.arrays = []
        for _ in self.fields:
            self.arrays += [
                np.zeros(cap, dtype=np.int8),
                np.zeros(cap, dtype=np.float64),
                np.zeros(cap, dtype=np.int32),
                np.full(cap, None, dtype=object),
            ]

    def _columns(self, i: int) -> list[npt.NDArray[Any]]:
        return self.arrays[4 * i : 4 * i + 4]

    # -- writes ------------------------------------------------------------------------

    def write(self, row: int, record: Mapping[str, Any]) -> None:
        """Set ``row``'s values from ``record`` (a record as stored)."""
        for i, f in enumerate(self.fields):
            meta = self._meta[f]
            kind, num, code, obj = self._columns(i)
            value = lookup(record, meta.path)
            k, n, c, o = self._encode(meta, value)
            kind[row], num[row], code[row], obj[row] = k, n, c, o

    def clear(self, row: int) -> None:
        """Forget ``row``'s values (a vacated row keeps no reference)."""
        for i in range(len(self.fields)):
            kind, _num, _code, obj = self._columns(i)
            kind[row] = _MISSING
            obj[row] = None

    @staticmethod
    def _encode(meta: _Field, value: Any) -> tuple[int, float, int, Any]:
        if value is MISSING:
            return _MISSING, 0.0, 0, None
        if value is None:
            return _NULL, 0.0, 0, None
        if isinstance(value, bool):
            return (_TRUE if value else _FALSE), 0.0, 0, None
        if isinstance(value, float):
            return _NUM, value, 0, None
        if isinstance(value, int):
            f = _exact_float(value)
            return (_NUM, f, 0, None) if f is not None else (_PY, 0.0, 0, value)
        if isinstance(value, str):
            return _STR, 0.0, meta.intern(value), None
        return _PY, 0.0, 0, value

    # -- reads -------------------------------------------------------------------------

    def select(self, mf: MetadataFilter, rows: Rows) -> Rows:
        """The ``rows`` whose values pass every condition of ``mf``."""
        keep = np.ones(rows.size, dtype=bool)
        for cond in mf.conditions:
            if not keep.any():
                break
            keep &= self._condition(cond, rows)
        return rows[keep]

    def _condition(self, cond: FieldCondition, rows: Rows) -> Mask:
        i = self.fields.index(cond.field)
        meta = self._meta[cond.field]
        kind_col, num_col, code_col, obj_col = self._columns(i)
        cols = _Slice(kind_col[rows], num_col[rows], code_col[rows])
        kind = cols.kind
        mask = np.ones(rows.size, dtype=bool)
        for op, operand in cond.ops:
            if op == "$eq":
                mask &= self._eq(meta, cols, operand)
            elif op == "$ne":
                mask &= ~self._eq(meta, cols, operand)
            elif op in ("$in", "$nin"):
                hit = np.zeros(rows.size, dtype=bool)
                for x in operand:
                    hit |= self._eq(meta, cols, x)
                mask &= hit if op == "$in" else ~hit
            elif op == "$exists":
                mask &= (kind != _MISSING) if operand else (kind == _MISSING)
            else:
                mask &= self._range(meta, cols, op, operand)
        py = np.nonzero(kind == _PY)[0]
        for j in py.tolist():
            mask[j] = cond.holds(obj_col[int(rows[j])])
        return mask

    @staticmethod
    def _eq(meta: _Field, cols: _Slice, operand: Any) -> Mask:
        kind, num, code = cols
        if operand is None:
            return _mask(kind == _NULL)
        if isinstance(operand, bool):
            return _mask(kind == (_TRUE if operand else _FALSE))
        if isinstance(operand, int | float):
            f = float(operand) if isinstance(operand, float) else _exact_float(operand)
            if f is None:  # no float64 equals an int it cannot hold
                return np.zeros(kind.size, dtype=bool)
            return _mask((kind == _NUM) & (num == f))
        c = meta.codes.get(operand)
        if c is None:
            return np.zeros(kind.size, dtype=bool)
        return _mask((kind == _STR) & (code == c))

    @staticmethod
    def _range(meta: _Field, cols: _Slice, op: str, operand: Any) -> Mask:
        kind, num, code = cols
        if isinstance(operand, bool) or operand is None:
            return np.zeros(kind.size, dtype=bool)
        if isinstance(operand, int | float):
            return _mask((kind == _NUM) & _num_compare(num, op, operand))
        ordered, rank_of = meta.ranks()
        if not ordered:
            return np.zeros(kind.size, dtype=bool)
        rank = rank_of[np.where(kind == _STR, code, 0)]
        lo, hi = bisect.bisect_left(ordered, operand), bisect.bisect_right(ordered, operand)
        if op == "$gt":
            hit = rank >= hi
        elif op == "$gte":
            hit = rank >= lo
        elif op == "$lt":
            hit = rank < lo
        else:
            hit = rank < hi
        return _mask((kind == _STR) & hit)


def _mask(values: Any) -> Mask:
    """A comparison's result as the boolean array it is (numpy types it loosely)."""
    out: Mask = values
    return out


def _num_compare(num: npt.NDArray[np.float64], op: str, operand: int | float) -> Mask:
    """``num op operand`` exactly, for float64 ``num`` and an int or float operand (an
    int no float holds is placed between its two neighbouring floats)."""
    if isinstance(operand, float) or _exact_float(operand) is not None:
        f = float(operand)
        if op == "$gt":
            return num > f
        if op == "$gte":
            return num >= f
        if op == "$lt":
            return num < f
        return num <= f
    try:
        f = float(operand)
    except OverflowError:
        f = math.inf if operand > 0 else -math.inf
    if f > operand:
        lo, hi = math.nextafter(f, -math.inf), f
    else:
        lo, hi = f, math.nextafter(f, math.inf)
    if op in ("$gt", "$gte"):
        return num >= hi
    return num <= lo
