"""Validation's fast paths agree with the exact slow paths they stand in for.

``canonical_copy`` copies a record made of exact JSON types directly instead of
parsing its canonical JSON back; ``validate_embedding`` settles a list of plain
floats with one type count and one norm. Each is checked here against the path it
replaces (the codec's canonical JSON and exact parse; the element-wise check): the
same accept/reject, the same message, and results equal type for type (an int stays
an int, -0.0 keeps its sign, key order as parsed).
"""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bifrost.errors import InvalidArguments
from bifrost.idempotency import request_digest
from bifrost.jsoncodec import _all_finite, _no_int64_overflow
from bifrost.memory.validation import validate_embedding, validate_upsert
from bifrost.records import CanonicalBatch, canonical_copy, canonical_record, load_canonical


class _Str(str):
    pass


class _Int(int):
    pass


class _Float(float):
    pass


_EDGE_FLOATS = st.sampled_from(
    [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1e308, -1e308, 1.5, 2.0**63, 1e16]
)
_NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | _EDGE_FLOATS
    | _NON_FINITE
    | st.text(max_size=6)
    | st.sampled_from([_Str("s"), _Int(3), _Float(2.5), "\ud800"])
)
_keys = st.text(max_size=4) | st.sampled_from([1, _Str("k")])
_values = st.recursive(
    _leaves,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(_keys, inner, max_size=4)
    ),
    max_leaves=25,
)
_records = st.dictionaries(_keys, _values, max_size=6)


def same(a: Any, b: Any) -> bool:
    """Equal, type for type, float bits and key order included."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    return bool(a == b)


def slow_copy(record: dict[str, Any], index: int | None) -> tuple[bytes, bool, dict[str, Any]]:
    """What validation did before the fast path: canonical JSON, then the exact parse."""
    text, plain = canonical_record(record, index)
    return text, plain, load_canonical(text, plain)


def outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args, **kwargs)
    except InvalidArguments as exc:
        return "refused", (type(exc), str(exc), exc.details)


@given(_records)
@pytest.mark.slow
def test_canonical_copy_agrees_with_the_exact_parse(record: dict[Any, Any]) -> None:
    fast_kind, fast = outcome(canonical_copy, record, 3)
    slow_kind, slow = outcome(slow_copy, record, 3)
    assert fast_kind == slow_kind
    if fast_kind == "refused":
        assert fast == slow
    else:
        assert fast[:2] == slow[:2]
        assert same(fast[2], slow[2])


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=8))
def test_a_checked_float_field_is_copied_like_the_rest(values: list[float]) -> None:
    record = {"embedding": values, "z": {"n": 1, "v": [-0.0, None]}, "a": "x"}
    text, plain, copy = canonical_copy(record, 0, floats_key="embedding")
    slow = slow_copy(record, 0)
    assert (text, plain) == slow[:2]
    assert same(copy, slow[2])


def test_the_copy_is_private() -> None:
    record: dict[str, Any] = {"e": [1.0, 2.0], "m": {"l": [1, [2]]}}
    copy = canonical_copy(record, floats_key="e")[2]
    record["e"].append(3.0)
    record["m"]["l"][1].append(9)
    record["m"]["new"] = True
    assert copy == {"e": [1.0, 2.0], "m": {"l": [1, [2]]}}


def test_the_batch_keeps_every_text_of_its_copies() -> None:
    batch = CanonicalBatch()
    assert batch.add_copy({"b": None, "a": [-0.0]}, 0) == ({"a": [-0.0], "b": None}, True)
    first = batch.records_json
    assert first == [b'{"a":[-0.0],"b":null}']
    assert batch.add_copy({"n": 2**70}, 1) == ({"n": 2**70}, False)  # not orjson's alone
    later = batch.records_json
    assert later is None
    with pytest.raises(InvalidArguments, match="record 2: not JSON-serialisable"):
        batch.add_copy({"v": [1.0, math.nan]}, 2)


def slow_embedding(value: object, dim: int, what: str) -> list[float]:
    """The element-wise check every embedding once went through."""
    if not isinstance(value, list):
        raise InvalidArguments(f"{what} must be a list of numbers")
    if len(value) != dim:
        raise InvalidArguments(f"{what} length {len(value)} != {dim}")
    out: list[float] = []
    for x in value:
        if isinstance(x, bool) or not isinstance(x, int | float):
            raise InvalidArguments(f"{what} must contain only numbers")
        try:
            f = float(x)
        except OverflowError:
            raise InvalidArguments(f"{what} contains a non-finite number") from None
        if not math.isfinite(f):
            raise InvalidArguments(f"{what} contains a non-finite number")
        out.append(f)
    norm = math.hypot(*out)
    if not (norm > 0.0 and math.isfinite(norm)):
        raise InvalidArguments(f"{what} has zero (or overflowing) norm")
    return out


_elements = (
    st.floats()
    | _EDGE_FLOATS
    | _NON_FINITE
    | st.integers(min_value=-(2**1100), max_value=2**1100)
    | st.booleans()
    | st.none()
    | st.sampled_from(["1.0", _Float(1.5), _Int(2)])
)


@given(st.lists(st.floats(), min_size=3, max_size=3) | st.lists(_elements, min_size=2, max_size=4))
def test_validate_embedding_agrees_with_the_element_wise_check(value: list[Any]) -> None:
    fast_kind, fast = outcome(validate_embedding, value, 3, "record 1: embedding")
    slow_kind, slow = outcome(slow_embedding, value, 3, "record 1: embedding")
    assert (fast_kind, fast_kind == "ok" or fast == slow) == (slow_kind, True)
    if fast_kind == "ok":
        assert same(fast, slow)


@given(st.lists(st.floats(width=32), min_size=4, max_size=4), _records)
def test_validate_upsert_keeps_what_was_sent(embedding: list[float], extra: dict[Any, Any]) -> None:
    record = {
        **{k: v for k, v in extra.items() if k not in ("id", "revision", "injection_source")},
        "id": "c",
        "embedding": embedding,
        "scope": {},
        "origin": "conversation",
    }
    fast_kind, fast = outcome(
        validate_upsert, [record], None, "k", None, embedding_dim=4, max_batch=1
    )
    if fast_kind == "refused":
        emb_kind, emb = outcome(slow_embedding, embedding, 4, "record 0: embedding")
        assert fast == (emb if emb_kind == "refused" else outcome(slow_copy, record, 0)[1])
        return
    (chunk,) = fast
    assert same(chunk.record, slow_copy(record, 0)[2])
    assert same(chunk.embedding, slow_embedding(embedding, 4, "e"))
    assert fast.digest == request_digest([record], None)


def every_float(obj: Any, ok: Any) -> bool:
    """The walk of the codec's checks, one element at a time."""
    if isinstance(obj, float):
        return bool(ok(obj))
    if isinstance(obj, dict):
        return all(every_float(v, ok) for v in obj.values())
    if isinstance(obj, list | tuple):
        return all(every_float(v, ok) for v in obj)
    return True


@given(_values | st.lists(_EDGE_FLOATS | _NON_FINITE, max_size=6))
def test_the_codecs_float_walks_agree_with_one_element_at_a_time(value: Any) -> None:
    finite = _all_finite(value)
    assert finite == every_float(value, math.isfinite)
    if finite:  # what a JSON parse gives: the overflow check never sees a NaN
        assert _no_int64_overflow(value) == every_float(value, lambda f: abs(f) < 2.0**63)


def test_validated_chunks_say_what_validation_found() -> None:
    """``floats``: the embedding field holds floats only; ``plain``: orjson alone wrote
    the record (an integer past 64 bits is the standard library's)."""
    recs = [
        {"id": "a", "embedding": [1.0, 2.0], "scope": {}},
        {"id": "b", "embedding": [1, 2.0], "scope": {}},
        {"id": "c", "vector": [1.0, -0.0], "scope": {}, "n": 2**70},
        {"id": "d", "embedding": [3, 4], "scope": {}, "n": 2**70},
    ]
    request = validate_upsert(recs, None, "k", None, embedding_dim=2, max_batch=10)
    assert [(c.id, c.floats, c.plain) for c in request] == [
        ("a", True, True),
        ("b", False, True),
        ("c", True, False),
        ("d", False, False),
    ]


def test_a_record_too_deep_for_the_standard_librarys_writer_is_refused_typed() -> None:
    """Past orjson's 255 levels the standard library writes; past the recursion limit it
    cannot, and that is InvalidArguments, not a RecursionError."""
    deep: Any = 1
    for _ in range(5_000):
        deep = [deep]
    with pytest.raises(InvalidArguments, match="record 3: not JSON-serialisable"):
        canonical_record({"d": deep}, 3)
