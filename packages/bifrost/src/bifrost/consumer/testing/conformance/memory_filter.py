"""Conformance: exact metadata filters (memory-plane.md "Beyond v1") on ``search``
and ``scan``: every operator against the oracle (:class:`MetadataFilter.matches`),
with missing fields, null, arrays, nested paths, big ints and mixed types; errors;
and a property test (random records and filters: each backend's search and scan
equal brute force over the oracle)."""

from __future__ import annotations

import itertools
import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bifrost.consumer.testing.conformance._helpers import DIM, chunk, cosine, ctx
from bifrost.consumer.testing.conformance.memory_base import MemoryKitBase, MemoryStoreFactory
from bifrost.errors import InvalidArguments, InvalidFilter
from bifrost.memory.filters import validate_filter

_KEYS = itertools.count()
FIELDS = ["kind", "n", "metadata.tag", "metadata.deep.x", "flag"]
BIG = 2**53 + 1

# Values a field takes across the fixed records: every JSON type, arrays of mixed
# types, an object, big ints, unicode; None below means "absent".
VALUES: list[Any] = [
    "a",
    "b",
    "B",
    "é",
    "\U0001f600",
    "",
    "5",
    5,
    5.0,
    5.5,
    -1,
    0,
    BIG,
    float(2**53),
    10**30,
    True,
    False,
    None,
    [1, "a"],
    [5, None],
    [],
    [[5]],
    {"x": 5},
    1e308,
    -0.0,
]
OPERANDS: list[Any] = [
    "a",
    "b",
    "é",
    "5",
    "",
    5,
    5.0,
    5.5,
    -1,
    0,
    BIG,
    2**53,
    10**30,
    1e308,
    True,
    False,
    None,
    "\U0001f600",
    "zz",
]


def _vector(i: int) -> list[float]:
    return [math.cos(i * 0.7 + d) + (d == i % DIM) for d in range(DIM)]


def fixed_records() -> list[dict[str, Any]]:
    recs: list[dict[str, Any]] = []
    for i in range(60):
        extra: dict[str, Any] = {}
        v = VALUES[i % len(VALUES)]
        w = VALUES[(i * 7 + 3) % len(VALUES)]
        if i % 6:
            extra["kind"] = v
        if i % 5:
            extra["n"] = w
        meta: dict[str, Any] = {}
        if i % 4:
            meta["tag"] = VALUES[(i * 3) % len(VALUES)]
        if i % 3 == 0:
            meta["deep"] = {"x": v} if i % 2 else v  # a path through a non-object
        if i % 7:
            extra["metadata"] = meta
        elif i % 2:
            extra["metadata"] = "not an object"
        if i % 2:
            extra["flag"] = bool(i % 4 == 1)
        scope = {"tenant": f"t{i % 3}"}
        recs.append(chunk(f"r{i:02d}", _vector(i), scope, **extra))
    return recs


def conditions() -> list[Any]:
    out: list[Any] = []
    for x in OPERANDS:
        out += [x, {"$eq": x}, {"$ne": x}]
        out += [{op: x} for op in ("$gt", "$gte", "$lt", "$lte")]
    out += [
        {"$in": ["a", 5, None]},
        {"$nin": ["a", 5, None]},
        {"$in": [True]},
        {"$nin": [BIG, "é"]},
        {"$exists": True},
        {"$exists": False},
        {"$gte": 0, "$lt": 6},
        {"$gt": "a", "$lte": "é"},
        {"$ne": None, "$exists": True},
    ]
    return out


def _around(g: float) -> list[Any]:
    """Numbers at the edges of float ``g`` (large: its shortest decimal is not its
    exact value): ``g``, its neighbours, and the ints at its exact value, at its
    shortest decimal and one either side of each."""
    exact, shortest = int(g), int(Decimal(repr(g)))
    near = {exact - 1, exact, exact + 1, shortest - 1, shortest, shortest + 1}
    return [g, math.nextafter(g, -math.inf), math.nextafter(g, math.inf), *sorted(near)]


# Floats beyond 2**53 whose shortest decimal is (1e30, 2.0**70, 2.0**63, -1e30,
# 1e308) or is not (2.0**53, 1e16) their exact value: an int at either compares with
# the float by exact value, as Python (the oracle) does.
BIG_NUMBERS: list[Any] = sorted(
    {
        (type(n), n): n  # an int and an equal float are two numbers here
        for g in (1e30, 2.0**70, 2.0**63, -1e30, 2.0**53, 1e16, 1e308)
        for n in _around(g)
    }.values(),
    key=lambda n: (n, isinstance(n, float)),
)


def big_number_records() -> list[dict[str, Any]]:
    """One record per big number (the value), then arrays of two neighbours."""
    recs = [chunk(f"b{i:03d}", _vector(i), {"tenant": "t"}, n=v) for i, v in enumerate(BIG_NUMBERS)]
    pairs = itertools.pairwise(BIG_NUMBERS)
    recs += [
        chunk(f"c{i:03d}", _vector(i), {"tenant": "t"}, n=[a, b]) for i, (a, b) in enumerate(pairs)
    ]
    return recs


def expected(
    records: list[dict[str, Any]],
    mf: dict[str, Any],
    scope: dict[str, str],
    q: list[float],
    top_k: int,
) -> tuple[list[str], list[str]]:
    """Brute force over the oracle: the search's ids and the scan's ids."""
    flt = validate_filter(mf, FIELDS)
    assert flt is not None
    passing = [
        r
        for r in records
        if flt.matches(r) and all(r["scope"].get(k) == v for k, v in scope.items())
    ]
    ranked = sorted(passing, key=lambda r: (-cosine(q, r["embedding"]), r["id"]))
    return [r["id"] for r in ranked[:top_k]], sorted(r["id"] for r in passing)


def _check(
    store: Any,
    records: list[dict[str, Any]],
    mf: dict[str, Any],
    scope: dict[str, str],
    top_k: int = 1000,
) -> None:
    q = _vector(3)
    want_search, want_scan = expected(records, mf, scope, q, top_k)
    got = store.search(q, top_k=top_k, scope_all=scope, metadata_filter=mf)
    got_ids = [r["chunk_id"] for r in got]
    assert sorted(got_ids) == sorted(want_search), mf
    assert len(got_ids) == min(top_k, len(want_scan))
    page = store.scan(scope_all=scope, metadata_filter=mf, limit=1000)
    assert [r["id"] for r in page["items"]] == want_scan, mf


class MemoryFilterTests(MemoryKitBase):
    @pytest.fixture
    def filtered(self, make_store: MemoryStoreFactory) -> Any:
        return make_store(embedding_dim=DIM, filterable_fields=FIELDS)

    def test_fields_are_advertised(self, filtered: Any, store: Any) -> None:
        assert filtered.describe_store()["filterable_metadata_fields"] == FIELDS
        assert store.describe_store()["filterable_metadata_fields"] == []

    @pytest.mark.parametrize("field", FIELDS)
    def test_every_operator_matches_the_oracle(self, filtered: Any, field: str) -> None:
        records = fixed_records()
        filtered.upsert_many(records, idempotency_key="k", ctx=ctx())
        for cond in conditions():
            _check(filtered, records, {field: cond}, {})
        _check(filtered, records, {field: {"$ne": "a"}, "flag": True}, {"tenant": "t1"})
        _check(filtered, records, {field: {"$exists": True}}, {"tenant": "t2"}, top_k=3)

    def test_big_ints_against_floats_match_the_oracle(self, filtered: Any) -> None:
        # Ints beyond 2**53 against floats (and the reverse), as scalars and in
        # arrays, by every operator: equal only at the float's exact value.
        records = big_number_records()
        filtered.upsert_many(records, idempotency_key="k", ctx=ctx())
        for x in BIG_NUMBERS:
            for op in ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte"):
                _check(filtered, records, {"n": {op: x}}, {})
        for xs in ([1e30, 2**70], [10**30, 2.0**63], [2**63 - 1]):
            _check(filtered, records, {"n": {"$in": xs}}, {})
            _check(filtered, records, {"n": {"$nin": xs}}, {})

    @pytest.mark.parametrize(
        "mf",
        [
            {"undeclared": 1},
            {"metadata": 1},
            {"kind": {"$regex": "a"}},
            {"kind": {}},
            {"kind": {"$in": []}},
            {"kind": {"$in": "a"}},
            {"kind": {"$in": [[1]]}},
            {"kind": {"$in": list(range(257))}},
            {"kind": {"$exists": 1}},
            {"kind": {"$eq": [1]}},
            {"kind": {"$gt": {"a": 1}}},
            {"kind": [1]},
            {"kind": float("nan")},
            [{"kind": 1}],
            "kind",
        ],
    )
    def test_bad_filter(self, filtered: Any, mf: Any) -> None:
        with pytest.raises(InvalidFilter):
            filtered.search(_vector(0), top_k=1, metadata_filter=mf)
        with pytest.raises(InvalidFilter):
            filtered.scan(metadata_filter=mf)

    def test_no_declared_fields_is_v1(self, store: Any) -> None:
        with pytest.raises(InvalidArguments):
            store.search(_vector(0), top_k=1, metadata_filter={"kind": 1})
        with pytest.raises(InvalidArguments):
            store.scan(metadata_filter={"kind": 1})
        assert store.scan(metadata_filter={}) == {"items": [], "next_after_id": None}

    def test_filter_follows_writes(self, filtered: Any) -> None:
        filtered.upsert_many([chunk("a", _vector(0), kind="x")], idempotency_key="1", ctx=ctx())
        assert [r["id"] for r in filtered.scan(metadata_filter={"kind": "x"})["items"]] == ["a"]
        filtered.upsert_many([chunk("a", _vector(0), kind="y")], idempotency_key="2", ctx=ctx())
        assert filtered.scan(metadata_filter={"kind": "x"})["items"] == []
        assert [
            r["chunk_id"]
            for r in filtered.search(_vector(0), top_k=5, metadata_filter={"kind": "y"})
        ] == ["a"]
        filtered.delete_many(["a"])
        assert filtered.search(_vector(0), top_k=5, metadata_filter={"kind": "y"}) == []

    def test_selective_filter_keeps_exact_top_k(self, filtered: Any) -> None:
        # Out-of-filter chunks score higher than every passing one.
        q = _vector(1)
        recs = [chunk(f"h{i:03d}", q, kind="hot") for i in range(150)]
        recs += [chunk(f"c{i}", _vector(i + 10), kind="cold") for i in range(5)]
        filtered.upsert_many(recs, idempotency_key="k", ctx=ctx())
        got = filtered.search(q, top_k=10, metadata_filter={"kind": "cold"})
        assert sorted(r["chunk_id"] for r in got) == [f"c{i}" for i in range(5)]

    @settings(
        max_examples=25,
        deadline=None,
        # Every backend's test class runs this one kit method (its executor differs by
        # design when several backends run in one process).
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.differing_executors,
        ],
    )
    @given(data=st.data())
    def test_property_search_and_scan_equal_brute_force(self, filtered: Any, data: Any) -> None:
        scalars = st.sampled_from(OPERANDS) | st.integers(-3, 3) | st.sampled_from(["a", "b", "c"])
        values = scalars | st.lists(scalars, max_size=3) | st.just({"o": 1})
        n = data.draw(st.integers(0, 25))
        records = []
        for i in range(n):
            extra = data.draw(st.dictionaries(st.sampled_from(["kind", "n", "flag"]), values))
            if data.draw(st.booleans()):
                extra["metadata"] = {"tag": data.draw(values)}
            scope = {"tenant": data.draw(st.sampled_from(["t0", "t1"]))}
            records.append(
                chunk(f"p{i:02d}", _vector(data.draw(st.integers(0, 40))), scope, **extra)
            )
        old = [r["id"] for r in filtered.scan(limit=1000)["items"]]
        if old:
            filtered.delete_many(old)
        if records:
            filtered.upsert_many(records, idempotency_key=f"p{next(_KEYS)}", ctx=ctx())
        op = data.draw(
            st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists"])
        )
        if op in ("$in", "$nin"):
            operand: Any = data.draw(st.lists(scalars, min_size=1, max_size=3))
        elif op == "$exists":
            operand = data.draw(st.booleans())
        else:
            operand = data.draw(scalars)
        field = data.draw(st.sampled_from(["kind", "n", "flag", "metadata.tag"]))
        scope = data.draw(st.sampled_from([{}, {"tenant": "t1"}]))
        _check(filtered, records, {field: {op: operand}}, scope, top_k=data.draw(st.integers(1, 8)))
