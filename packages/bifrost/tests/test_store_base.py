"""``bifrost.store_base``: the verbs' keyword arguments declared once. A method that
takes them as ``**args: Unpack[...]`` still refuses a misspelt or missing keyword
the way an explicit signature does (a misspelt ``scope_all`` must not widen a read),
and passes every declared keyword on, the absent ones as None."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from bifrost.affect.protocol import ListArgs
from bifrost.client import AsyncBifrostClient, BifrostClient
from bifrost.consumer.testing import InMemoryAffectStore, InMemoryMemoryStore
from bifrost.consumer.testing.support import DIM, KEY, chunk
from bifrost.context import DispatchContext
from bifrost.errors import InvalidArguments
from bifrost.memory.protocol import ScanArgs, SearchArgs
from bifrost.store_base import WriteArgs, keywords

CTX = DispatchContext(actor="a", plane="memory")


def test_keywords_fills_the_absent_ones_with_none() -> None:
    assert keywords("scan", {"limit": 3}, ScanArgs) == {
        "scope_all": None,
        "scope_any": None,
        "metadata_filter": None,
        "include": None,
        "limit": 3,
        "after_id": None,
    }
    assert keywords("list", {}, ListArgs) == dict.fromkeys(
        ("scope_all", "scope_any", "limit", "after_key")
    )
    assert set(keywords("search", {}, SearchArgs)) == {
        "scope_all",
        "scope_any",
        "metadata_filter",
        "include",
        "fidelity_target",
    }


def test_keywords_refuses_unknown_and_missing_ones_as_python_does() -> None:
    with pytest.raises(TypeError, match=r"^scan\(\) got an unexpected keyword argument 'scope'$"):
        keywords("scan", {"scope": {"tenant": "t"}}, ScanArgs)
    with pytest.raises(TypeError, match=r"^put_many\(\) missing required keyword argument 'ctx'$"):
        keywords("put_many", {"idempotency_key": "k"}, WriteArgs)


def test_store_verbs_refuse_a_misspelt_keyword_before_reading() -> None:
    memory = InMemoryMemoryStore(DIM)
    memory.upsert_many([chunk("c", 0, {"tenant": "t"})], idempotency_key="k", ctx=CTX)
    with pytest.raises(TypeError, match="'scopeall'"):
        memory.search([1.0] + [0.0] * (DIM - 1), top_k=1, scopeall={"tenant": "u"})  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="'scopeall'"):
        memory.scan(scopeall={"tenant": "u"})  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="'scopeall'"):
        InMemoryAffectStore().list(scopeall={"tenant": "u"})  # type: ignore[call-arg]
    assert memory.scan(scope_all={"tenant": "u"}) == {"items": [], "next_after_id": None}


def test_a_search_is_validated_with_the_stores_search_limits() -> None:
    store = InMemoryMemoryStore(DIM, max_top_k=3)
    assert store.search_limits == {
        "embedding_dim": DIM,
        "max_top_k": 3,
        "max_scope_any": store.max_scope_any,
        "filterable": (),
    }
    with pytest.raises(InvalidArguments, match=r"top_k must be in 1\.\.3"):
        store.search([1.0] + [0.0] * (DIM - 1), top_k=4)


def test_batch_writes_need_their_key_and_context_and_write_nothing_without() -> None:
    memory, affect = InMemoryMemoryStore(DIM), InMemoryAffectStore()
    with pytest.raises(TypeError, match="missing required keyword argument 'idempotency_key'"):
        memory.upsert_many([chunk("c", 0)], ctx=CTX)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="missing required keyword argument 'ctx'"):
        affect.put_many([{"key": "k", "scope": {}}], idempotency_key="k")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'expected'"):
        affect.put_many([{"key": "k", "scope": {}}], idempotency_key="k", ctx=CTX, expected={})  # type: ignore[call-arg]
    assert memory.scan()["items"] == [] and affect.list()["items"] == []


def _client(sent: list[dict[str, Any]]) -> BifrostClient:
    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(httpx.Response(200, content=request.content).json())
        return httpx.Response(
            200, json={"ok": True, "result": {"items": [], "next_after_id": None}}
        )

    return BifrostClient(
        "http://x", KEY, actor="a", plane="memory", transport=httpx.MockTransport(handler)
    )


def test_client_scan_sends_only_the_keywords_given() -> None:
    sent: list[dict[str, Any]] = []
    with _client(sent) as client:
        client.scan(limit=2, scope_all={"tenant": "t"}, include=None)
        assert list(client.scan_all(page_size=5, metadata_filter={"kind": "x"})) == []
        with pytest.raises(TypeError, match="'scopeall'"):
            client.scan(scopeall={"tenant": "t"})  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="'scopeall'"):
            list(client.scan_all(scopeall={"tenant": "t"}))  # type: ignore[call-arg]
    assert [(e["verb"], e["args"]) for e in sent] == [
        ("scan", {"limit": 2, "scope_all": {"tenant": "t"}}),
        ("scan", {"limit": 5, "metadata_filter": {"kind": "x"}}),
    ]


def test_async_client_scan_all_walks_with_the_selection() -> None:
    sent: list[dict[str, Any]] = []
    pages = iter([["a", "b"], ["c"]])

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(httpx.Response(200, content=request.content).json())
        ids = next(pages)
        more = ids[-1] if len(ids) == 2 else None
        items = [{"id": i} for i in ids]
        return httpx.Response(
            200, json={"ok": True, "result": {"items": items, "next_after_id": more}}
        )

    async def walk() -> list[str]:
        client = AsyncBifrostClient(
            "http://x", KEY, actor="a", plane="memory", transport=httpx.MockTransport(handler)
        )
        try:
            return [
                r["id"] async for r in client.scan_all(page_size=2, scope_any=[{"tenant": "t"}])
            ]
        finally:
            await client.aclose()

    assert anyio.run(walk) == ["a", "b", "c"]
    assert [e["args"] for e in sent] == [
        {"limit": 2, "scope_any": [{"tenant": "t"}]},
        {"limit": 2, "after_id": "b", "scope_any": [{"tenant": "t"}]},
    ]
