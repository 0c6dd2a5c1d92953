"""Q16.16 fixed point: how VMP turns floats into integers and measures distance exactly.

A value ``v`` is stored as ``int(v * 65536)``: the float product (exact, since
65536 is a power of two and the range keeps it far from overflow) truncated
toward zero. Distances are squared L2 sums over those integers, computed
exactly; a score is that integer divided by ``2**32`` (Python's correctly
rounded int/int division), so the same inputs give the same float everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ratatoskr.vmp.errors import DimMismatch, InvalidArgument

SCALE_BITS = 16
SCALE = 1 << SCALE_BITS  # 65536
SCORE_DIVISOR = 1 << (2 * SCALE_BITS)  # 2**32: squared Q16.16 units back to real units

MIN_VALUE = -32768.0
MAX_VALUE = 32767.99
# The extreme stored integers: -2**31 and int(32767.99 * 65536) = 2147482992.
Q_MIN = int(MIN_VALUE * SCALE)
Q_MAX = int(MAX_VALUE * SCALE)

# Dimensions above this would let the exact 64-bit partial sums of the search overflow.
MAX_DIM = 4096


def to_fixed(value: object) -> int:
    """One value as Q16.16; raises InvalidArgument for non-numbers, non-finite or out-of-range."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument("vector values must be numbers")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgument("vector values must be finite")
    if not MIN_VALUE <= value <= MAX_VALUE:
        raise InvalidArgument("vector values must lie within [-32768.0, 32767.99]")
    return int(value * SCALE)


def to_fixed_vector(values: object, dim: int) -> list[int]:
    """A whole vector as Q16.16 integers.

    Raises InvalidArgument when ``values`` is not a list/tuple of numbers in range,
    DimMismatch when its length is not ``dim``.
    """
    if not isinstance(values, list | tuple):
        raise InvalidArgument("vector must be an array of numbers")
    if len(values) != dim:
        raise DimMismatch(f"vector has {len(values)} values, the store's dimension is {dim}")
    return [to_fixed(v) for v in values]


def to_fixed_array(values: object, dim: int) -> npt.NDArray[np.int64]:
    """:func:`to_fixed_vector` as an int64 array: the same integers, the same errors.

    Lists of plain floats and ints (what JSON gives) are checked by Python's own
    exact comparisons and converted in one numpy pass: a finite ``sum`` means no
    NaN or infinity (either makes the sum NaN or infinite), after which ``min`` and
    ``max`` bound every value exactly; ``v * 65536.0`` is exact in float64 (a
    power-of-two scaling, far from overflow) and the cast to int64 truncates toward
    zero, as ``int()`` does. Anything else — other types, or a value the pass finds
    non-finite or out of range — goes through :func:`to_fixed_vector`, so the error
    raised is the one it raises.
    """
    if type(values) is list and len(values) == dim and _PLAIN_NUMBERS.issuperset(map(type, values)):
        try:
            finite = math.isfinite(sum(values))
        except OverflowError:  # an int too large for a double: out of range
            finite = False
        if finite and min(values) >= MIN_VALUE and max(values) <= MAX_VALUE:
            return (np.array(values, dtype=np.float64) * float(SCALE)).astype(np.int64)
    return np.array(to_fixed_vector(values, dim), dtype=np.int64)


_PLAIN_NUMBERS = frozenset((float, int))


def from_fixed(q: int) -> float:
    """The real value a stored integer stands for (exact: a Q16.16 value fits a double)."""
    return q / SCALE


def squared_l2(a: Sequence[int], b: Sequence[int]) -> int:
    """The exact squared L2 distance of two Q16.16 vectors (the reference the search must match)."""
    if len(a) != len(b):
        raise ValueError("vectors differ in length")
    return sum((x - y) * (x - y) for x, y in zip(a, b, strict=True))


def score_of(squared: int) -> float:
    """A squared Q16.16 distance in real units, correctly rounded: ``squared / 2**32``."""
    return squared / SCORE_DIVISOR
