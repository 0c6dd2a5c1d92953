"""The JSON bifrost writes for digests, copies and storage: canonical, exact, strict."""

from __future__ import annotations

import json
import math
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bifrost import jsoncodec
from bifrost.errors import InvalidArguments
from bifrost.jsoncodec import canonical_json, json_loads_exact
from bifrost.memory.validation import json_copy, validate_embedding

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@given(json_values)
@pytest.mark.slow
def test_round_trip_is_exact(value: Any) -> None:
    data = canonical_json(value)
    back = json_loads_exact(data)
    assert back == value
    assert json.loads(data) == value  # plain JSON any client can read
    assert canonical_json(back) == data  # canonical: stable under a round trip


def test_keys_sorted_no_spaces_utf8() -> None:
    assert canonical_json({"b": 1, "a": ["é", 2.5]}) == '{"a":["é",2.5],"b":1}'.encode()


def test_big_integers_stay_integers() -> None:
    for n in (2**63, -(2**63) - 1, 10**30, 10**400, -(10**400)):
        assert json_loads_exact(canonical_json({"n": n})) == {"n": n}
        assert type(json_loads_exact(canonical_json([n]))[0]) is int


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize(
    "where",
    [
        lambda x: x,
        lambda x: {"a": {"b": [1, x]}},
        lambda x: [0.5] * 300 + [x],  # inside a float list: the C-level fast path
        lambda x: [1, "s", x],  # a mixed list
        lambda x: (x,),
    ],
)
def test_nan_and_infinity_are_refused_everywhere(bad: float, where: Any) -> None:
    with pytest.raises(ValueError, match="NaN"):
        canonical_json(where(bad))


def test_big_integers_inside_mixed_and_nested_values() -> None:
    value: Any = {"a": [1, "x", 10**25, [2**64]], "b": {"c": -(2**70)}, "f": [1e300, -1e19]}
    assert json_loads_exact(canonical_json(value)) == value
    back: Any = json_loads_exact(canonical_json(value))
    assert back["a"][2] == 10**25
    assert jsoncodec._no_int64_overflow(orjson.loads(canonical_json([0.5, 2**62]))) is True


def test_overflowing_sum_of_finite_floats_is_fine() -> None:
    assert json_loads_exact(canonical_json([1e308, 1e308])) == [1e308, 1e308]


def test_json_copy_refuses_nan_in_opaque_fields() -> None:
    with pytest.raises(InvalidArguments, match="not JSON-serialisable"):
        json_copy({"id": "x", "meta": {"weight": math.nan}})


def test_json_copy_is_private() -> None:
    rec: Any = {"id": "x", "nested": {"list": [1, 2]}}
    copy = json_copy(rec)
    assert copy == rec
    copy["nested"]["list"].append(3)
    assert rec["nested"]["list"] == [1, 2]


def test_embedding_fast_path_agrees_with_the_slow_one() -> None:
    assert validate_embedding([0.5, -0.25, 1e-300], 3) == [0.5, -0.25, 1e-300]
    assert validate_embedding([1, 2.0, 3], 3) == [1.0, 2.0, 3.0]
    assert validate_embedding([1e308] * 3, 3) == [1e308] * 3  # finite; hypot does not overflow
    for bad in ([math.nan, 1.0, 1.0], [math.inf, 1.0, 1.0], [0.0, 0.0, 0.0]):
        with pytest.raises(InvalidArguments):
            validate_embedding(bad, 3)
