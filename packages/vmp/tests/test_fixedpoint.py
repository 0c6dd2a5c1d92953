"""Q16.16 conversion (truncation toward zero, range, finiteness) and the exact distance."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratatoskr.vmp import DimMismatch, InvalidArgument
from ratatoskr.vmp.fixedpoint import (
    Q_MAX,
    Q_MIN,
    score_of,
    squared_l2,
    to_fixed,
    to_fixed_vector,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.0, 0),
        (-0.0, 0),
        (1.0, 65536),
        (-1.0, -65536),
        (0.5, 32768),
        # 0.1 * 65536 = 6553.6000000000004 -> 6553; -0.1 truncates toward zero to -6553.
        (0.1, 6553),
        (-0.1, -6553),
        (1.5 / 65536, 1),
        (-1.5 / 65536, -1),
        (0.99 / 65536, 0),
        (-0.99 / 65536, 0),
        (-32768.0, -(2**31)),
        (32767.99, 2147482992),
        (3, 196608),
        (-32768, -(2**31)),
    ],
)
def test_to_fixed_truncates_toward_zero(value: float, expected: int) -> None:
    assert to_fixed(value) == expected


def test_extremes() -> None:
    assert Q_MIN == -(2**31)
    assert Q_MAX == int(32767.99 * 65536) == 2147482992


@pytest.mark.parametrize(
    "value",
    [
        math.nan,
        math.inf,
        -math.inf,
        32767.991,
        32768.0,
        -32768.0001,
        10**400,
        -(10**400),
        True,
        False,
        None,
        "1.0",
        [1.0],
    ],
)
def test_to_fixed_rejects(value: object) -> None:
    with pytest.raises(InvalidArgument) as info:
        to_fixed(value)
    assert info.value.status == 400


@given(st.floats(min_value=-32768.0, max_value=32767.99, allow_nan=False))
def test_to_fixed_is_float_product_truncated(value: float) -> None:
    q = to_fixed(value)
    assert q == math.trunc(value * 65536)
    assert Q_MIN <= q <= Q_MAX
    # Truncation toward zero: |q| never exceeds |v·2^16|, and is within one unit of it.
    assert abs(q) <= abs(value * 65536) < abs(q) + 1


def test_to_fixed_vector_checks_length_then_values() -> None:
    assert to_fixed_vector([1, 2.5], 2) == [65536, 163840]
    assert to_fixed_vector((1, 2), 2) == [65536, 131072]
    with pytest.raises(DimMismatch):
        to_fixed_vector([1.0, 2.0, 3.0], 2)
    with pytest.raises(DimMismatch):
        to_fixed_vector([], 2)
    with pytest.raises(InvalidArgument):
        to_fixed_vector("12", 2)
    with pytest.raises(InvalidArgument):
        to_fixed_vector({"a": 1}, 2)
    with pytest.raises(InvalidArgument):
        to_fixed_vector([1.0, math.nan], 2)


def test_squared_l2_and_score_are_exact() -> None:
    a = [Q_MIN] * 16
    b = [Q_MAX] * 16
    exact = 16 * (Q_MAX - Q_MIN) ** 2
    assert squared_l2(a, b) == exact
    assert exact > 2**64  # would overflow any 64-bit accumulator
    assert score_of(exact) == exact / 2**32
    assert score_of(2**32) == 1.0
    assert squared_l2([1, 2], [1, 2]) == 0
