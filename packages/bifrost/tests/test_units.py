"""Errors, idempotency helpers, shared validators, dispatch routing and the spy store."""

from __future__ import annotations

from typing import Any

import pytest

from bifrost.affect import (
    AFFECT_CAPABILITIES,
    dispatch_affect_call,
    validate_history,
    validate_list,
    validate_put,
)
from bifrost.consumer.testing import InMemoryAffectStore, InMemoryMemoryStore
from bifrost.consumer.testing.support import SpyMemoryStore
from bifrost.context import DispatchContext
from bifrost.errors import (
    InvalidArguments,
    MalformedEnvelope,
    UnknownVerb,
    UnsupportedVerb,
    UnsupportedWireVersion,
    render_error,
)
from bifrost.idempotency import idempotency_id, request_digest, ttl_seconds
from bifrost.jsoncodec import canonical_json
from bifrost.memory import (
    MEMORY_VERBS,
    StoreCapabilities,
    dispatch_memory_call,
    record_id,
    search_row,
    validate_embedding,
    validate_ids,
    validate_search,
    validate_upsert,
)


def test_unknown_exception_renders_internal() -> None:
    status, body = render_error(KeyError("secret"), plane="memory", call_id=None)
    assert status == 500
    assert body == {
        "ok": False,
        "call_id": None,
        "error": {"code": "bifrost.internal", "message": "internal error", "details": {}},
    }


def test_idempotency_helpers() -> None:
    assert canonical_json({"b": 1, "a": "é"}) == '{"a":"é","b":1}'.encode()
    with pytest.raises(ValueError, match="JSON"):
        canonical_json({"x": float("nan")})
    d1 = request_digest([{"a": 1, "b": 2}], None)
    assert d1 == request_digest([{"b": 2, "a": 1}], {})
    assert d1 != request_digest([{"a": 1, "b": 2}], {"x": 0})
    assert len(d1) == 64
    assert (
        idempotency_id("upsert_many", "actor", "key") == '["default","upsert_many","actor","key"]'
    )
    assert idempotency_id("put_many", "a", "k") != idempotency_id("upsert_many", "a", "k")
    assert [ttl_seconds(c) for c in (None, "default", "ephemeral", "durable")] == [
        86400,
        86400,
        900,
        604800,
    ]
    with pytest.raises(InvalidArguments):
        ttl_seconds("weekly")


def test_capabilities() -> None:
    assert StoreCapabilities().to_dict() == {
        "relational_edges_supported": False,
        "optimistic_locking_supported": True,
        "atomic_supersede_supported": False,
        "transaction_supported": False,
        "filterable_metadata_fields": [],
    }
    assert AFFECT_CAPABILITIES == {
        "history_supported": True,
        "optimistic_locking_supported": True,
        "transaction_supported": False,
        "filterable_metadata_fields": [],
    }


def test_validators() -> None:
    assert record_id({"id": None, "chunk_id": "c", "memory_id": "m"}) == "c"
    assert record_id({"memory_id": "m"}) == "m"
    assert validate_embedding([1, 2.5], 2) == [1.0, 2.5]
    with pytest.raises(InvalidArguments, match="record 1"):
        validate_upsert(
            [
                {"id": "a", "embedding": [1.0], "scope": {}},
                {"id": "b", "embedding": [0], "scope": {}},
            ],
            None,
            "k",
            None,
            embedding_dim=1,
            max_batch=10,
        )
    chunks = validate_upsert(
        [{"id": "a", "vector": [1.0, 0], "scope": {"tenant": "t"}, "x": [1]}],
        {"a": 0},
        "k",
        "ephemeral",
        embedding_dim=2,
        max_batch=10,
    )
    assert (chunks[0].id, chunks[0].embedding, chunks[0].scope) == (
        "a",
        [1.0, 0.0],
        {"tenant": "t"},
    )
    q = validate_search(
        [1, 0], 3, None, [{"tenant": "t"}], {}, {"embedding": False}, embedding_dim=2, max_top_k=5
    )
    assert (q.top_k, q.scope_all, q.scope_any, q.include_embedding) == (
        3,
        {},
        [{"tenant": "t"}],
        False,
    )
    assert validate_ids(["a", "a"], max_batch=2) == ["a", "a"]
    row = search_row({"id": "a", "embedding": [1], "distillate": "d"}, "a", 1, 2, False)
    assert row == {
        "chunk": {"id": "a", "distillate": "d"},
        "chunk_id": "a",
        "score": 1.0,
        "recalled_view": "d",
        "revision": 2,
    }


def test_affect_validators() -> None:
    items = validate_put([{"key": "k", "scope": {}, "v": 1}], {"k": 0}, "i", None, max_batch=5)
    assert (items[0].key, items[0].record) == ("k", {"key": "k", "scope": {}, "v": 1})
    assert validate_history("k", None, None, max_page=500).limit == 50
    assert validate_history("k", None, None, max_page=10).limit == 10
    assert validate_list(None, None, 3, "a", max_page=5).after_key == "a"


def env(verb: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"wire_version": "0.6", "call_id": "c", "verb": verb, "args": args or {}}


def test_dispatch_routing() -> None:
    store = InMemoryMemoryStore(2)
    ctx = DispatchContext(actor="a")
    for verb in (
        "upsert_edges",
        "get_edges_for",
        "mark_invalid",
        "mark_superseded",
        "patch_many",
        "atomic_supersede",
        "acquire_lease",
        "renew_lease",
        "release_lease",
        "get_checkpoint",
        "put_checkpoint",
    ):
        with pytest.raises(UnsupportedVerb):
            dispatch_memory_call(store, env(verb), ctx)
    with pytest.raises(UnknownVerb):
        dispatch_memory_call(store, env("put_many"), ctx)
    with pytest.raises(InvalidArguments, match="unknown argument 'scope'"):
        dispatch_memory_call(store, env("get", {"chunk_id": "a", "scope": {}}), ctx)
    with pytest.raises(InvalidArguments, match="missing argument 'top_k'"):
        dispatch_memory_call(store, env("search", {"vector": [1, 0]}), ctx)
    with pytest.raises(InvalidArguments, match="idempotency_key is required"):
        dispatch_memory_call(store, env("upsert_many", {"records": []}), ctx)
    with pytest.raises(MalformedEnvelope):
        dispatch_memory_call(store, {"verb": "get"}, ctx)
    with pytest.raises(UnsupportedWireVersion):
        dispatch_memory_call(store, {**env("get"), "wire_version": "0.5"}, ctx)


def test_affect_dispatch_routing() -> None:
    store = InMemoryAffectStore()
    ctx = DispatchContext(actor="a", plane="affect")
    with pytest.raises(UnknownVerb):
        dispatch_affect_call(store, env("search"), ctx)
    with pytest.raises(InvalidArguments):
        dispatch_affect_call(store, env("history", {"key": "k", "page": 2}), ctx)
    with pytest.raises(InvalidArguments):
        dispatch_affect_call(store, env("put_many", {"records": []}), ctx)
    assert dispatch_affect_call(store, env("list"), ctx) == {"items": [], "next_after_key": None}


def test_spy_store_records_each_verb_that_reaches_it() -> None:
    store = SpyMemoryStore(2)
    ctx = DispatchContext(actor="a")
    rec = {"id": "a", "embedding": [1.0, 0.0], "scope": {}}
    calls = [
        env("describe_store"),
        env("health"),
        {**env("upsert_many", {"records": [rec]}), "idempotency_key": "k"},
        env("search", {"vector": [1.0, 0.0], "top_k": 1}),
        env("scan"),
        env("get", {"chunk_id": "a"}),
        env("get_many", {"ids": ["a"]}),
        env("delete_many", {"ids": ["a"]}),
    ]
    results = [dispatch_memory_call(store, e, ctx) for e in calls]
    assert store.calls == list(MEMORY_VERBS)
    assert results[2] == {"upserted": 1, "replayed": False}
    assert results[4] == {"items": [{**rec, "revision": 1}], "next_after_id": None}
    assert results[5] == {**rec, "revision": 1}
    assert results[7] == {"deleted": 1}
    with pytest.raises(InvalidArguments):
        store.get_many("a")  # type: ignore[arg-type]
    assert store.calls[-1] == "get_many"  # recorded before the reference store refused it
    assert SpyMemoryStore.search.__qualname__ == "SpyMemoryStore.search"
