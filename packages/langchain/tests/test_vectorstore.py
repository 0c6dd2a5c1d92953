"""RatatoskrVectorStore on a real ``ratatoskr serve`` beyond the standard suite: ids
across tenants, scores, filters, MMR, the retriever, construction, bad input (the
error, and nothing written) and records other clients wrote under the same scope."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_ratatoskr import EmbeddingDimensionMismatch, RatatoskrVectorStore

from bifrost.client import BifrostClient
from bifrost.errors import InvalidArguments, InvalidFilter

from .conftest import KEY, KeyedEmbeddings, axis, embeddings, fresh_scope

TEXTS = {"tea": axis(0), "tea, again": axis(0, also=1, weight=0.05), "rain": axis(1)}
TEXTS |= {"tea and rain": axis(0, also=1), "not tea": [-x for x in axis(0)]}


@pytest.fixture
def keyed(memory_url: str) -> Iterator[RatatoskrVectorStore]:
    """A store whose embedder gives the vectors of TEXTS."""
    with RatatoskrVectorStore(
        embedding=KeyedEmbeddings(TEXTS), url=memory_url, key=KEY, scope=fresh_scope()
    ) as vs:
        yield vs
        vs.delete()


def open_store(url: str, scope: dict[str, str], **kw: Any) -> RatatoskrVectorStore:
    return RatatoskrVectorStore(embedding=embeddings(), url=url, key=KEY, scope=scope, **kw)


def test_two_tenants_using_the_same_id_never_meet(memory_url: str) -> None:
    a_scope, b_scope = fresh_scope(), fresh_scope()
    with open_store(memory_url, a_scope) as a, open_store(memory_url, b_scope) as b:
        assert a.add_texts(["ada's note"], [{"who": "ada"}], ids=["1"]) == ["1"]
        # Without the namespace this write names ada's chunk: 403 Forbidden.
        assert b.add_texts(["bob's note"], [{"who": "bob"}], ids=["1"]) == ["1"]
        # On the plane: two chunks, two different ids, both ending in ".1".
        with BifrostClient(memory_url, KEY.encode(), plane="memory", actor="admin") as admin:
            both = admin.call("scan", {"scope_any": [a_scope, b_scope]})["items"]
        assert len({r["id"] for r in both}) == 2
        assert all(r["id"].endswith(".1") for r in both)
        assert a.get_by_ids(["1"]) == [
            Document(id="1", page_content="ada's note", metadata={"who": "ada"})
        ]
        assert b.get_by_ids(["1"]) == [
            Document(id="1", page_content="bob's note", metadata={"who": "bob"})
        ]
        assert [d.page_content for d in a.similarity_search("note", k=10)] == ["ada's note"]
        assert [d.page_content for d in b.similarity_search("note", k=10)] == ["bob's note"]
        a.delete(["1"])
        assert a.get_by_ids(["1"]) == []
        assert [d.page_content for d in b.get_by_ids(["1"])] == ["bob's note"]
        b.delete()
    with BifrostClient(memory_url, KEY.encode(), plane="memory", actor="admin") as admin:
        assert admin.call("scan", {"scope_any": [a_scope, b_scope]})["items"] == []


def test_the_record_layout_on_the_plane(memory_url: str) -> None:
    scope = fresh_scope()
    with open_store(memory_url, scope) as vs:
        vs.add_texts(["hello"], [{"kind": "note", "n": 1, "nested": {"x": [1, 2.5]}}], ids=["h"])
        with BifrostClient(memory_url, KEY.encode(), plane="memory", actor="x", scope=scope) as c:
            (record,) = c.call("scan", {"include": {"embedding": False}})["items"]
        assert record["id"].endswith(".h") and record["id"].startswith("lc.")
        assert record["scope"] == scope
        assert record["content"] == "hello"
        assert record["metadata"] == {"kind": "note", "n": 1, "nested": {"x": [1, 2.5]}}
        assert set(record) == {"id", "scope", "content", "metadata", "revision"}
        vs.delete()


def test_scores_are_cosine_and_relevance_maps_them_onto_0_1(
    keyed: RatatoskrVectorStore,
) -> None:
    keyed.add_texts(["tea", "rain", "not tea"], ids=["t", "r", "n"])
    scored = keyed.similarity_search_with_score("tea", k=3)
    assert [(d.id, round(s, 6)) for d, s in scored] == [("t", 1.0), ("r", 0.0), ("n", -1.0)]
    relevance = keyed.similarity_search_with_relevance_scores("tea", k=3)
    assert [round(s, 6) for _, s in relevance] == [1.0, 0.5, 0.0]
    by_vector = keyed.similarity_search_by_vector(axis(1), k=1)
    assert [d.id for d in by_vector] == ["r"]
    threshold = keyed.similarity_search_with_relevance_scores("tea", k=3, score_threshold=0.4)
    assert [d.id for d, _ in threshold] == ["t", "r"]


def test_async_scores_match_sync(memory_url: str) -> None:
    vs = RatatoskrVectorStore(
        embedding=KeyedEmbeddings(TEXTS), url=memory_url, key=KEY, scope=fresh_scope()
    )

    async def first() -> None:
        await vs.aadd_texts(["tea", "rain", "not tea"], ids=["t", "r", "n"])
        scored = await vs.asimilarity_search_with_score("tea", k=3)
        assert scored == vs.similarity_search_with_score("tea", k=3)
        docs = await vs.asimilarity_search_by_vector(axis(1), k=1)
        assert [d.id for d in docs] == ["r"]

    async def second() -> None:
        # Another event loop: the store opens an async client of its own there.
        assert [d.id for d in await vs.asimilarity_search("rain", k=1)] == ["r"]
        await vs.adelete()
        assert await vs.asimilarity_search("rain", k=1) == []
        await vs.aclose()

    asyncio.run(first())
    asyncio.run(second())


def test_mmr_prefers_a_different_document_over_a_near_duplicate(
    keyed: RatatoskrVectorStore,
) -> None:
    keyed.add_texts(["tea", "tea, again", "tea and rain"], ids=["t", "t2", "tr"])
    assert [d.id for d in keyed.similarity_search("tea", k=2)] == ["t", "t2"]
    # the query is "tea" itself, so lambda_mult must be under 0.5 for diversity to count
    mmr = keyed.max_marginal_relevance_search("tea", k=2, fetch_k=3, lambda_mult=0.25)
    assert [d.id for d in mmr] == ["t", "tr"]
    assert mmr[1].page_content == "tea and rain" and mmr[1].metadata == {}
    # lambda_mult=1: closeness only, as a similarity search
    only_close = keyed.max_marginal_relevance_search("tea", k=2, fetch_k=3, lambda_mult=1.0)
    assert [d.id for d in only_close] == ["t", "t2"]
    amm = asyncio.run(keyed.amax_marginal_relevance_search("tea", k=2, fetch_k=3, lambda_mult=0.25))
    assert [d.id for d in amm] == ["t", "tr"]
    keyed.delete(["t", "t2", "tr"])
    assert keyed.max_marginal_relevance_search("tea", k=2) == []


def test_filters_are_evaluated_by_the_plane(memory_url: str) -> None:
    with open_store(memory_url, fresh_scope()) as vs:
        meta = [
            {"kind": "note", "year": 2019},
            {"kind": "note", "year": 2023, "tags": ["tea"]},
            {"kind": "mail", "year": 2024},
        ]
        vs.add_texts(["a", "b", "c"], meta, ids=["a", "b", "c"])

        def found(flt: dict[str, Any]) -> list[str]:
            return sorted(d.id or "" for d in vs.similarity_search("x", k=10, filter=flt))

        assert found({"kind": "note"}) == ["a", "b"]
        assert found({"year": {"$gte": 2020}}) == ["b", "c"]
        assert found({"$and": [{"kind": "note"}, {"year": {"$gt": 2020}}]}) == ["b"]
        assert found({"kind": {"$in": ["mail", "other"]}}) == ["c"]
        assert found({"tags": "tea"}) == ["b"]
        assert found({"tags": {"$exists": False}}) == ["a", "c"]
        assert found({"kind": {"$ne": "note"}}) == ["c"]
        mmr = vs.max_marginal_relevance_search("x", k=5, filter={"kind": "mail"})
        assert [d.id for d in mmr] == ["c"]
        asearch = asyncio.run(vs.asimilarity_search("x", k=10, filter={"year": 2019}))
        assert [d.id for d in asearch] == ["a"]
        # A key the server does not declare filterable: the plane's InvalidFilter.
        with pytest.raises(InvalidFilter):
            vs.similarity_search("x", filter={"colour": "red"})
        # What the plane has no operator for: refused before anything is sent.
        with pytest.raises(ValueError, match=r"\$or has no counterpart"):
            vs.similarity_search("x", filter={"$or": [{"kind": "note"}, {"year": 2024}]})
        vs.delete()


def test_retriever(keyed: RatatoskrVectorStore) -> None:
    keyed.add_texts(
        ["tea", "tea, again", "tea and rain", "rain"],
        [{"kind": "a"}, {"kind": "b"}, {"kind": "a"}, {"kind": "b"}],
        ids=["t", "t2", "tr", "r"],
    )
    retriever = keyed.as_retriever(search_kwargs={"k": 2})
    assert [d.id for d in retriever.invoke("tea")] == ["t", "t2"]
    assert [d.id for d in asyncio.run(retriever.ainvoke("tea"))] == ["t", "t2"]
    filtered = keyed.as_retriever(search_kwargs={"k": 2, "filter": {"kind": "b"}})
    assert [d.id for d in filtered.invoke("tea")] == ["t2", "r"]
    mmr = keyed.as_retriever(
        search_type="mmr", search_kwargs={"k": 2, "fetch_k": 3, "lambda_mult": 0.25}
    )
    assert [d.id for d in mmr.invoke("tea")] == ["t", "tr"]
    threshold = keyed.as_retriever(
        search_type="similarity_score_threshold",
        search_kwargs={"k": 4, "score_threshold": 0.8},  # tr: (1 + 0.707) / 2
    )
    assert [d.id for d in threshold.invoke("tea")] == ["t", "t2", "tr"]


def test_from_texts(memory_url: str) -> None:
    scope = fresh_scope()
    vs = RatatoskrVectorStore.from_texts(
        ["one", "two"],
        embeddings(),
        [{"n": 1}, {"n": 2}],
        ids=["1", "2"],
        url=memory_url,
        key=KEY.encode(),  # bytes or str
        scope=scope,
        actor="notebook",
    )
    assert sorted(d.page_content for d in vs.get_by_ids(["2", "1"])) == ["one", "two"]
    assert vs.embeddings is vs.embedding
    vs.close()

    async def afrom() -> list[Document]:
        store = await RatatoskrVectorStore.afrom_texts(
            ["three"], embeddings(), url=memory_url, key=KEY, scope=scope
        )
        async with store:
            return await store.aget_by_ids(["1", "2", "nope"])

    assert [d.id for d in asyncio.run(afrom())] == ["1", "2"]
    with open_store(memory_url, scope) as again:
        assert len(again.similarity_search("x", k=10)) == 3
        again.delete()


def test_bad_input_raises_and_writes_nothing(memory_url: str) -> None:
    scope = fresh_scope()
    with open_store(memory_url, scope) as vs:
        vs.add_texts(["kept"], ids=["k"])

        def unchanged() -> None:
            docs = vs.similarity_search("x", k=10)
            assert [(d.id, d.page_content) for d in docs] == [("k", "kept")]

        wrong_dim = RatatoskrVectorStore(
            embedding=DeterministicFakeEmbedding(size=5), url=memory_url, key=KEY, scope=scope
        )
        with pytest.raises(EmbeddingDimensionMismatch, match="vectors of 5 dimensions, the"):
            wrong_dim.add_texts(["five"], ids=["f"])
        with pytest.raises(EmbeddingDimensionMismatch, match="RATATOSKR_MEMORY_EMBEDDING_DIM"):
            wrong_dim.similarity_search("five")
        with pytest.raises(EmbeddingDimensionMismatch):
            asyncio.run(wrong_dim.aadd_texts(["five"]))
        wrong_dim.close()
        with pytest.raises(ValueError, match="ids repeat"):
            vs.add_texts(["a", "b"], ids=["d", "d"])
        with pytest.raises(ValueError, match="1 ids for 2 texts"):
            vs.add_texts(["a", "b"], ids=["d"])
        with pytest.raises(ValueError, match="1 metadatas for 2 texts"):
            vs.add_texts(["a", "b"], [{}])
        with pytest.raises(TypeError, match=r"metadatas\[0\] is list"):
            vs.add_texts(["a"], [["not", "a", "dict"]])  # type: ignore[list-item]
        with pytest.raises(TypeError, match=r"texts\[1\] is int"):
            vs.add_texts(["a", 2])  # type: ignore[list-item]
        with pytest.raises(InvalidArguments, match="not JSON data"):
            vs.add_texts(["a"], [{"when": object()}], ids=["j"])
        with pytest.raises(InvalidArguments, match="NaN or infinity"):
            vs.add_texts(["a"], [{"x": float("nan")}], ids=["n"])
        with pytest.raises(ValueError, match="at most"):
            vs.add_texts(["a"], ids=["x" * 600])
        with pytest.raises(TypeError, match="unexpected keyword arguments: batch"):
            vs.add_texts(["a"], batch=3)
        with pytest.raises(TypeError, match="unexpected keyword arguments: where"):
            vs.similarity_search("a", where={"kind": "x"})
        with pytest.raises(TypeError, match="unexpected keyword arguments: cascade"):
            vs.delete(["k"], cascade=True)
        short = RatatoskrVectorStore(
            embedding=KeyedEmbeddings({}), url=memory_url, key=KEY, scope=scope
        )
        short.embedding.embed_documents = lambda texts: []  # type: ignore[method-assign]
        with pytest.raises(ValueError, match="gave 0 vectors for 1 texts"):
            short.add_texts(["lost"], ids=["l"])
        short.close()
        unchanged()
        assert vs.add_texts([]) == []
        assert asyncio.run(vs.aadd_texts([])) == []
        unchanged()
        vs.delete()


def test_construction_errors(memory_url: str) -> None:
    with pytest.raises(TypeError, match="needs url= and key="):
        RatatoskrVectorStore(embedding=embeddings(), url=memory_url)
    with pytest.raises(InvalidArguments):
        RatatoskrVectorStore(
            embedding=embeddings(), url=memory_url, key=KEY, scope={"planet": "earth"}
        )


def test_records_other_clients_wrote_are_read_and_left_alone(memory_url: str) -> None:
    scope = fresh_scope()
    with (
        BifrostClient(memory_url, KEY.encode(), plane="memory", actor="wt", scope=scope) as wt,
        open_store(memory_url, scope) as vs,
    ):
        wt.upsert_many(
            [
                {"id": "wt-1", "embedding": axis(2), "scope": scope, "distillate": "prefers tea"},
                {"id": "wt-2", "embedding": axis(3), "scope": scope, "metadata": "not a dict"},
            ]
        )
        vs.add_texts(["mine"], ids=["m"])
        found = {d.id: d for d in vs.similarity_search("x", k=10)}
        assert found["wt-1"] == Document(id="wt-1", page_content="prefers tea", metadata={})
        assert found["wt-2"] == Document(id="wt-2", page_content="", metadata={})
        assert vs.delete() is True
        assert sorted(d.id or "" for d in vs.similarity_search("x", k=10)) == ["wt-1", "wt-2"]
        assert asyncio.run(vs.adelete()) is True
        assert [r["id"] for r in wt.call("scan", {})["items"]] == ["wt-1", "wt-2"]
        wt.delete_many(["wt-1", "wt-2"])
