"""Every invalid input named in memory-plane.md gets its typed error, and the
database content (every row of every table) is unchanged afterwards."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from bifrost.context import DispatchContext
from bifrost.errors import (
    BifrostError,
    IdempotencyConflict,
    InvalidArguments,
    InvalidFilter,
    RevisionMismatch,
)
from ratatoskr.memory import RatatoskrMemoryStore

from .conftest import DIM, chunk, vec

TABLES = [
    "SELECT * FROM memory_chunks ORDER BY chunk_id",
    "SELECT chunk_id, embedding FROM memory_vec ORDER BY chunk_id",
    "SELECT * FROM memory_tombstones ORDER BY digest",
    "SELECT * FROM memory_counters ORDER BY name",
    "SELECT * FROM memory_idempotency ORDER BY idempotency_id",
    "SELECT * FROM ratatoskr_meta ORDER BY key",
    "SELECT * FROM ratatoskr_schema ORDER BY plane, version",
]


def dump(store: RatatoskrMemoryStore) -> list[list[tuple[Any, ...]]]:
    with store.database.read() as conn:
        return [[tuple(r) for r in conn.execute(sql)] for sql in TABLES]


CTX = DispatchContext(actor="agent-1")


def upsert(records: Any, **kw: Any) -> Callable[[RatatoskrMemoryStore], Any]:
    kw.setdefault("idempotency_key", "bad")
    return lambda s: s.upsert_many(records, ctx=CTX, **kw)


def search(**kw: Any) -> Callable[[RatatoskrMemoryStore], Any]:
    kw.setdefault("vector", vec(1))
    kw.setdefault("top_k", 3)
    vector = kw.pop("vector")
    return lambda s: s.search(vector, **kw)


def good(**extra: Any) -> dict[str, Any]:
    return chunk("new", 5, **extra)


def without(key: str) -> dict[str, Any]:
    rec = good()
    del rec[key]
    return rec


CASES: dict[str, tuple[Callable[[RatatoskrMemoryStore], Any], type[BifrostError]]] = {
    "records not a list": (upsert({"id": "x"}), InvalidArguments),
    "record not an object": (upsert([good(), "x"]), InvalidArguments),
    "missing id": (upsert([without("id")]), InvalidArguments),
    "empty id": (upsert([{**good(), "id": ""}]), InvalidArguments),
    "id not a string": (upsert([{**good(), "id": 7}]), InvalidArguments),
    "id over 512 bytes": (upsert([{**good(), "id": "é" * 257}]), InvalidArguments),
    "missing embedding": (upsert([without("embedding")]), InvalidArguments),
    "embedding too short": (upsert([{**good(), "embedding": [1.0] * (DIM - 1)}]), InvalidArguments),
    "embedding too long": (upsert([{**good(), "embedding": [1.0] * (DIM + 1)}]), InvalidArguments),
    "embedding not a list": (upsert([{**good(), "embedding": "1,2"}]), InvalidArguments),
    "embedding holds a string": (
        upsert([{**good(), "embedding": ["1"] + [1.0] * (DIM - 1)}]),
        InvalidArguments,
    ),
    "embedding holds a bool": (
        upsert([{**good(), "embedding": [True] + [1.0] * (DIM - 1)}]),
        InvalidArguments,
    ),
    "embedding holds NaN": (
        upsert([{**good(), "embedding": [float("nan")] + [1.0] * (DIM - 1)}]),
        InvalidArguments,
    ),
    "embedding holds inf": (
        upsert([{**good(), "embedding": [float("inf")] + [1.0] * (DIM - 1)}]),
        InvalidArguments,
    ),
    "zero embedding": (upsert([{**good(), "embedding": [0.0] * DIM}]), InvalidArguments),
    # One record of each stored form (float64 blob, int embedding kept in JSON) ahead
    # of the bad one: neither lands.
    "bad record after good ones of both forms": (
        upsert(
            [
                good(),
                {**chunk("ints", 6), "embedding": [1, 2] + [0] * (DIM - 2)},
                {**chunk("bad", 7), "embedding": [5e-324, float("inf")] + [1.0] * (DIM - 2)},
            ]
        ),
        InvalidArguments,
    ),
    "overwrite of a stored chunk rolled back by a revision check": (
        upsert(
            [{**chunk("a", 9), "embedding": [1, -0.0] + [2.5] * (DIM - 2)}, good()],
            expected_revisions={"a": 1, "new": 3},
        ),
        RevisionMismatch,
    ),
    "missing scope": (upsert([without("scope")]), InvalidArguments),
    "scope not an object": (upsert([{**good(), "scope": ["tenant"]}]), InvalidArguments),
    "scope axis off the lattice": (
        upsert([{**good(), "scope": {"planet": "x"}}]),
        InvalidArguments,
    ),
    "scope value empty": (upsert([{**good(), "scope": {"tenant": ""}}]), InvalidArguments),
    "scope value not a string": (upsert([{**good(), "scope": {"tenant": 1}}]), InvalidArguments),
    "scope nested": (upsert([{**good(), "scope": {"tenant": {"a": "b"}}}]), InvalidArguments),
    "NaN in an opaque field": (upsert([good(meta={"w": float("nan")})]), InvalidArguments),
    "reserved revision": (upsert([{**good(), "revision": 3}]), InvalidArguments),
    "injected without source": (upsert([good(origin="injected_context")]), InvalidArguments),
    "source without injection": (upsert([good(injection_source="x")]), InvalidArguments),
    "duplicate ids in batch": (upsert([good(), good()]), InvalidArguments),
    "batch over max_batch": (
        upsert([chunk(f"b{i}", i) for i in range(1001)]),
        InvalidArguments,
    ),
    "expected_revisions not an object": (
        upsert([good()], expected_revisions=[1]),
        InvalidArguments,
    ),
    "expected_revisions id not in batch": (
        upsert([good()], expected_revisions={"other": 1}),
        InvalidArguments,
    ),
    "expected_revisions negative": (
        upsert([good()], expected_revisions={"new": -1}),
        InvalidArguments,
    ),
    "expected_revisions bool": (
        upsert([good()], expected_revisions={"new": True}),
        InvalidArguments,
    ),
    "stale expected_revisions": (
        upsert([good(), {**chunk("a", 1)}], expected_revisions={"a": 5}),
        RevisionMismatch,
    ),
    "idempotency key empty": (upsert([good()], idempotency_key=""), InvalidArguments),
    "idempotency key None": (upsert([good()], idempotency_key=None), InvalidArguments),
    "idempotency key too long": (upsert([good()], idempotency_key="k" * 257), InvalidArguments),
    "idempotency key not a string": (upsert([good()], idempotency_key=5), InvalidArguments),
    "idempotency class unknown": (upsert([good()], idempotency_class="forever"), InvalidArguments),
    "idempotency key reused": (
        upsert([good()], idempotency_key="seed"),
        IdempotencyConflict,
    ),
    "search vector wrong length": (search(vector=[1.0] * 3), InvalidArguments),
    "search vector zero": (search(vector=[0.0] * DIM), InvalidArguments),
    "top_k zero": (search(top_k=0), InvalidArguments),
    "top_k over max": (search(top_k=1001), InvalidArguments),
    "top_k bool": (search(top_k=True), InvalidArguments),
    "top_k float": (search(top_k=2.0), InvalidArguments),
    "scope_all not an object": (search(scope_all=["tenant"]), InvalidArguments),
    "scope_all axis off lattice": (search(scope_all={"planet": "x"}), InvalidFilter),
    "scope_any not a list": (search(scope_any={"tenant": "x"}), InvalidArguments),
    "scope_any member not an object": (search(scope_any=["tenant"]), InvalidArguments),
    "scope_any axis off lattice": (search(scope_any=[{"planet": "x"}]), InvalidFilter),
    "metadata_filter non-empty": (search(metadata_filter={"a": 1}), InvalidArguments),
    "include unknown key": (search(include={"content": False}), InvalidArguments),
    "include non-bool": (search(include={"embedding": "no"}), InvalidArguments),
    "get id not a string": (lambda s: s.get(5), InvalidArguments),  # type: ignore[arg-type]
    "get empty id": (lambda s: s.get(""), InvalidArguments),
    "get_many not a list": (lambda s: s.get_many("a"), InvalidArguments),  # type: ignore[arg-type]
    "get_many over max_batch": (lambda s: s.get_many(["a"] * 1001), InvalidArguments),
    "delete_many not a list": (lambda s: s.delete_many("a"), InvalidArguments),  # type: ignore[arg-type]
    "delete_many bad id": (lambda s: s.delete_many(["a", 3]), InvalidArguments),  # type: ignore[list-item]
    "delete_many over max_batch": (lambda s: s.delete_many(["a"] * 1001), InvalidArguments),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_refused_and_nothing_changes(store: RatatoskrMemoryStore, case: str) -> None:
    store.upsert_many([chunk("a", 1), chunk("b", 2)], idempotency_key="seed", ctx=CTX)
    store.delete_many(["b"])
    before = dump(store)
    call, error = CASES[case]
    with pytest.raises(error):
        call(store)
    assert dump(store) == before
    assert [r["chunk_id"] for r in store.search(vec(1), top_k=5)] == ["a"]


def test_error_messages_hold_no_values(store: RatatoskrMemoryStore) -> None:
    secret = "SENTINEL-9f3a"
    with pytest.raises(InvalidArguments) as info:
        store.upsert_many(
            [{"id": "x", "embedding": [0.0] * DIM, "scope": {"tenant": secret}, "content": secret}],
            idempotency_key="k",
            ctx=CTX,
        )
    assert secret not in str(info.value)
    assert secret not in repr(info.value.details)
