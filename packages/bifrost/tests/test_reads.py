"""The read mixins of the store protocols (``MemoryReads``, ``AffectReads``): each
verb validates its arguments with the store's limits, and only validated
arguments (a query object, distinct ids in the order asked) reach ``perform_*``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

import bifrost.dispatch
import bifrost.memory.validation
from bifrost.affect.protocol import AFFECT_CAPABILITIES, AffectDataStore, AffectReads
from bifrost.affect.validation import HistoryQuery, ListQuery
from bifrost.consumer.testing import InMemoryAffectStore, InMemoryMemoryStore
from bifrost.context import DispatchContext
from bifrost.errors import Forbidden, InvalidArguments, InvalidFilter
from bifrost.memory.capabilities import StoreCapabilities
from bifrost.memory.dispatch import dispatch_memory_call
from bifrost.memory.protocol import MemoryReads, ScopeLookup
from bifrost.memory.validation import ScanQuery, SearchQuery
from bifrost.records import distinct_ids
from bifrost.scope import validate_scope


class Memory(MemoryReads):
    embedding_dim = 2
    max_batch = 3
    max_top_k = 4
    max_scope_any = 2

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def perform_search(self, query: SearchQuery) -> list[dict[str, Any]]:
        self.seen.append(("search", query))
        return [{"chunk_id": "a"}]

    def perform_scan(self, query: ScanQuery) -> list[tuple[str, dict[str, Any]]]:
        self.seen.append(("scan", query))
        return [(i, {"id": i, "revision": 1}) for i in ("a", "b", "c")[: query.limit + 1]]

    def perform_get(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        self.seen.append(("get", list(ids)))
        return [{"id": i, "revision": 1} for i in ids if i != "absent"]

    def perform_scopes_of(self, ids: Sequence[str]) -> dict[str, dict[str, str]]:
        self.seen.append(("scopes_of", list(ids)))
        return {i: {"tenant": "t"} for i in ids}

    def perform_delete(self, ids: Sequence[str], grant: Mapping[str, str]) -> int:
        self.seen.append(("delete", (list(ids), dict(grant))))
        return len(ids) - 1


class Affect(AffectReads):
    max_batch = 3
    max_page = 5
    max_scope_any = 2

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def perform_get(self, keys: Sequence[str]) -> list[dict[str, Any]]:
        self.seen.append(("get", list(keys)))
        return [{"key": k, "revision": 1} for k in keys if k != "absent"]

    def perform_history(self, query: HistoryQuery) -> dict[str, Any]:
        self.seen.append(("history", query))
        return {"items": [], "next_before_revision": None}

    def perform_list(self, query: ListQuery) -> dict[str, Any]:
        self.seen.append(("list", query))
        return {"items": [], "next_after_key": None}

    def perform_delete(self, keys: Sequence[str], grant: Mapping[str, str]) -> int:
        self.seen.append(("delete", (list(keys), dict(grant))))
        return len(keys)


def test_distinct_ids_keeps_first_order_and_validates() -> None:
    assert distinct_ids(["b", "a", "b"], max_batch=3) == ["b", "a"]
    with pytest.raises(InvalidArguments, match="keys: 4 exceeds max_batch 3"):
        distinct_ids(["a"] * 4, max_batch=3, what="keys")
    with pytest.raises(InvalidArguments, match=r"ids\[1\] must be a non-empty string"):
        distinct_ids(["a", ""], max_batch=3)


def test_memory_reads_hand_validated_arguments_to_the_store() -> None:
    store = Memory()
    assert isinstance(store, ScopeLookup)
    rows = store.search([3.0, 4.0], top_k=2, scope_all={"tenant": "t"}, fidelity_target=0.5)
    assert rows == [{"chunk_id": "a"}]
    assert store.get("a") == {"id": "a", "revision": 1}
    assert store.get("absent") is None
    assert store.get_many(["b", "a", "b"]) == [
        {"id": "b", "revision": 1},
        {"id": "a", "revision": 1},
    ]
    assert store.scopes_of(["a", "a"]) == {"a": {"tenant": "t"}}
    assert store.delete_many(["a", "b", "a"]) == {"deleted": 1}
    assert store.delete_many(["a"], grant={"tenant": "t"}) == {"deleted": 0}
    assert store.seen == [
        ("search", SearchQuery([3.0, 4.0], 2, {"tenant": "t"}, [], True)),
        ("get", ["a"]),
        ("get", ["absent"]),
        ("get", ["b", "a"]),
        ("scopes_of", ["a"]),
        ("delete", (["a", "b"], {})),
        ("delete", (["a"], {"tenant": "t"})),
    ]


def test_memory_reads_refuse_before_the_store_is_asked() -> None:
    store = Memory()
    with pytest.raises(InvalidArguments, match=r"top_k must be in 1\.\.4"):
        store.search([1.0, 0.0], top_k=5)
    with pytest.raises(InvalidArguments, match="vector length 3 != 2"):
        store.search([1.0, 0.0, 0.0], top_k=1)
    with pytest.raises(InvalidArguments, match="chunk_id must be a non-empty string"):
        store.get("")
    for verb in (store.get_many, store.scopes_of, store.delete_many):
        with pytest.raises(InvalidArguments, match="ids: 4 exceeds max_batch 3"):
            verb(["a", "b", "c", "d"])
    assert store.seen == []


def test_affect_reads_hand_validated_arguments_to_the_store() -> None:
    store = Affect()
    assert store.get("k") == {"key": "k", "revision": 1}
    assert store.get("absent") is None
    assert store.get_many(["k", "j", "k"]) == [
        {"key": "k", "revision": 1},
        {"key": "j", "revision": 1},
    ]
    assert store.history("k", before_revision=3) == {"items": [], "next_before_revision": None}
    assert store.list(scope_any=[{"tenant": "t"}], after_key="m", limit=2) == {
        "items": [],
        "next_after_key": None,
    }
    assert store.delete_many(["k", "k"]) == {"deleted": 1}
    assert store.delete_many(["k"], grant={"tenant": "t"}) == {"deleted": 1}
    assert store.seen == [
        ("get", ["k"]),
        ("get", ["absent"]),
        ("get", ["k", "j"]),
        ("history", HistoryQuery("k", 5, 3)),
        ("list", ListQuery({}, [{"tenant": "t"}], 2, "m")),
        ("delete", (["k"], {})),
        ("delete", (["k"], {"tenant": "t"})),
    ]


def test_affect_reads_refuse_before_the_store_is_asked() -> None:
    store = Affect()
    with pytest.raises(InvalidArguments, match="key must be a non-empty string"):
        store.get("")
    for verb in (store.get_many, store.delete_many):
        with pytest.raises(InvalidArguments, match="keys: 4 exceeds max_batch 3"):
            verb(["a", "b", "c", "d"])
    with pytest.raises(InvalidArguments, match=r"limit must be in 1\.\.5"):
        store.history("k", limit=6)
    with pytest.raises(InvalidArguments, match="before_revision"):
        store.history("k", before_revision=0)
    with pytest.raises(InvalidArguments, match=r"limit must be in 1\.\.5"):
        store.list(limit=6)
    assert store.seen == []


def test_the_reference_stores_satisfy_the_protocols_through_the_mixins() -> None:
    assert isinstance(InMemoryMemoryStore(2), MemoryReads)
    affect = InMemoryAffectStore()
    assert isinstance(affect, AffectReads) and isinstance(affect, AffectDataStore)


def test_describe_store_is_the_plane_s_capability_dict_each_time_a_fresh_copy() -> None:
    assert Memory().describe_store() == StoreCapabilities().to_dict()
    described = Affect().describe_store()
    assert described == AFFECT_CAPABILITIES
    described["filterable_metadata_fields"].append("x")
    assert Affect().describe_store() == AFFECT_CAPABILITIES


def test_dispatch_validates_a_search_once_with_the_grant(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return validate_scope(*args, **kwargs)

    monkeypatch.setattr(bifrost.memory.validation, "validate_scope", counted)
    monkeypatch.setattr(bifrost.dispatch, "validate_scope", counted)
    store = InMemoryMemoryStore(embedding_dim=2)
    ctx = DispatchContext(actor="a", scope={"tenant": "t"}, verb="upsert_many")
    rec = {"id": "c1", "embedding": [1.0, 0.0], "scope": {"tenant": "t"}}
    store.upsert_many([rec], idempotency_key="k", ctx=ctx)

    def search(**args: Any) -> Any:
        env = {"wire_version": "0.6", "call_id": "c", "verb": "search", "args": args}
        return dispatch_memory_call(store, env, DispatchContext(actor="a", scope={"tenant": "t"}))

    calls.clear()
    rows = search(vector=[1.0, 0.0], top_k=1, scope_all={"tenant": "t"})
    assert [r["chunk_id"] for r in rows] == ["c1"] and len(calls) == 1
    # The wire's order holds: the scope and the grant before the vector.
    with pytest.raises(InvalidFilter):
        search(vector="bad", top_k=1, scope_all={"planet": "x"})
    with pytest.raises(Forbidden):
        search(vector="bad", top_k=1, scope_all={"tenant": "u"})
    with pytest.raises(InvalidArguments, match="vector"):
        search(vector="bad", top_k=1)
