"""Bad input gets its typed error and leaves every row of every table unchanged."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from bifrost.affect import (
    Forbidden,
    IdempotencyConflict,
    InvalidArguments,
    InvalidFilter,
    RevisionMismatch,
    dispatch_affect_call,
)
from bifrost.context import DispatchContext
from ratatoskr.affect import RatatoskrAffectStore

from .conftest import rec

CTX = DispatchContext(actor="agent-1", plane="affect")
Call = Callable[[Any], Any]  # Any: the cases pass ill-typed arguments on purpose


def put(records: Any, key: Any = "k-new", **kw: Any) -> Call:
    return lambda s: s.put_many(records, idempotency_key=key, ctx=CTX, **kw)


BAD_CALLS: list[tuple[str, Call, type[Exception]]] = [
    ("records not a list", put({"key": "a"}), InvalidArguments),
    ("record not an object", put([rec("x"), "nope"]), InvalidArguments),
    ("missing key", put([{"scope": {}}]), InvalidArguments),
    ("empty key", put([rec("")]), InvalidArguments),
    ("key not a string", put([{**rec("x"), "key": 7}]), InvalidArguments),
    ("key over 512 bytes", put([rec("é" * 257)]), InvalidArguments),
    ("key with a lone surrogate", put([rec("\ud800")]), InvalidArguments),
    ("missing scope", put([{"key": "x"}]), InvalidArguments),
    ("scope not an object", put([rec("x", scope=["tenant"])]), InvalidArguments),  # type: ignore[arg-type]
    (
        "scope axis outside lattice",
        put([rec("x", scope={"planet": "pluto-secret"})]),
        InvalidArguments,
    ),
    ("scope value empty", put([rec("x", scope={"tenant": ""})]), InvalidArguments),
    ("reserved revision", put([{**rec("x"), "revision": 1}]), InvalidArguments),
    ("reserved recorded_at", put([{**rec("x"), "recorded_at": "now"}]), InvalidArguments),
    ("duplicate keys", put([rec("x"), rec("x")]), InvalidArguments),
    ("batch over max_batch", put([rec(f"x{i}") for i in range(4)]), InvalidArguments),
    ("NaN in payload", put([rec("x", v=math.nan)]), InvalidArguments),
    ("non-JSON payload", put([rec("x", v={1, 2})]), InvalidArguments),
    ("idempotency key missing", put([rec("x")], None), InvalidArguments),
    ("idempotency key empty", put([rec("x")], ""), InvalidArguments),
    ("idempotency key too long", put([rec("x")], "k" * 257), InvalidArguments),
    ("idempotency class unknown", put([rec("x")], idempotency_class="forever"), InvalidArguments),
    ("expected_revisions not an object", put([rec("x")], expected_revisions=[1]), InvalidArguments),
    (
        "expected_revisions foreign key",
        put([rec("x")], expected_revisions={"a": 1}),
        InvalidArguments,
    ),
    (
        "expected_revisions negative",
        put([rec("x")], expected_revisions={"x": -1}),
        InvalidArguments,
    ),
    ("expected_revisions bool", put([rec("x")], expected_revisions={"x": True}), InvalidArguments),
    ("revision mismatch", put([rec("x"), rec("a")], expected_revisions={"a": 1}), RevisionMismatch),
    ("must not exist", put([rec("a")], expected_revisions={"a": 0}), RevisionMismatch),
    ("idempotency conflict", put([rec("a", mood=2)], "k-used"), IdempotencyConflict),
    ("get: bad key", lambda s: s.get(""), InvalidArguments),
    ("get_many: not a list", lambda s: s.get_many("a"), InvalidArguments),
    ("get_many: bad member", lambda s: s.get_many(["a", 3]), InvalidArguments),
    ("get_many: too many", lambda s: s.get_many(["a"] * 4), InvalidArguments),
    ("history: bad key", lambda s: s.history(None), InvalidArguments),
    ("history: limit 0", lambda s: s.history("a", limit=0), InvalidArguments),
    ("history: limit over max_page", lambda s: s.history("a", limit=6), InvalidArguments),
    ("history: limit bool", lambda s: s.history("a", limit=True), InvalidArguments),
    ("history: before 0", lambda s: s.history("a", before_revision=0), InvalidArguments),
    ("history: before str", lambda s: s.history("a", before_revision="2"), InvalidArguments),
    ("list: scope_all not an object", lambda s: s.list(scope_all=["x"]), InvalidArguments),
    (
        "list: scope_all bad axis",
        lambda s: s.list(scope_all={"planet": "pluto-secret"}),
        InvalidFilter,
    ),
    ("list: scope_any not a list", lambda s: s.list(scope_any={"tenant": "t"}), InvalidArguments),
    (
        "list: scope_any bad axis",
        lambda s: s.list(scope_any=[{"planet": "pluto-secret"}]),
        InvalidFilter,
    ),
    ("list: limit too big", lambda s: s.list(limit=6), InvalidArguments),
    ("list: after_key empty", lambda s: s.list(after_key=""), InvalidArguments),
    ("delete_many: not a list", lambda s: s.delete_many("a"), InvalidArguments),
    ("delete_many: bad member", lambda s: s.delete_many(["a", ""]), InvalidArguments),
    ("delete_many: too many", lambda s: s.delete_many(["a", "b", "c", "d"]), InvalidArguments),
]


def envelope(verb: str, args: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"wire_version": "0.6", "call_id": "c1", "verb": verb, "args": args, **extra}


def dispatch(verb: str, args: dict[str, Any], grant: dict[str, str], **extra: Any) -> Call:
    ctx = DispatchContext(actor="agent-1", scope=grant, plane="affect", verb=verb)
    return lambda s: dispatch_affect_call(s, envelope(verb, args, **extra), ctx)


BAD_DISPATCHES: list[tuple[str, Call, type[Exception]]] = [
    (
        "unknown arg",
        dispatch("put_many", {"records": [rec("x")], "extra": 1}, {}, idempotency_key="i"),
        InvalidArguments,
    ),
    (
        "write outside the grant",
        dispatch(
            "put_many",
            {"records": [rec("x", scope={"tenant": "t2"})]},
            {"tenant": "t1"},
            idempotency_key="i",
        ),
        Forbidden,
    ),
    (
        "overwrite of a key outside the grant",
        dispatch(
            "put_many",
            {"records": [rec("b", scope={"tenant": "t1"})]},
            {"tenant": "t1"},
            idempotency_key="i",
        ),
        Forbidden,
    ),
    (
        "list reaching outside the grant",
        dispatch("list", {"scope_all": {"tenant": "t2"}}, {"tenant": "t1"}),
        Forbidden,
    ),
]


@pytest.fixture
def seeded(store: RatatoskrAffectStore) -> RatatoskrAffectStore:
    small = RatatoskrAffectStore(store.database, max_batch=3, max_page=5)
    small.put_many([rec("a"), rec("b", scope={"tenant": "t2"})], idempotency_key="k-seed", ctx=CTX)
    small.put_many([rec("a", mood=1)], idempotency_key="k-used", ctx=CTX)
    return small


@pytest.mark.parametrize(
    ("case", "call", "error"),
    BAD_CALLS + BAD_DISPATCHES,
    ids=[c[0] for c in BAD_CALLS + BAD_DISPATCHES],
)
def test_bad_input_raises_its_type_and_changes_nothing(
    seeded: RatatoskrAffectStore, case: str, call: Call, error: type[Exception]
) -> None:
    before = seeded.dump()
    assert before["affect_history"] and before["affect_idempotency"]
    with pytest.raises(error) as info:
        call(seeded)
    assert type(info.value) is error, case
    assert seeded.dump() == before
    # Error messages never echo payload or scope values (an unknown axis is named when
    # it is identifier-shaped, so that the caller can see which one is wrong).
    for secret in ("calm", "t2", "pluto-secret", "é" * 10):
        assert secret not in str(info.value)
