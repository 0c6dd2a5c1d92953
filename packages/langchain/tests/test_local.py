"""RatatoskrVectorStore on a memory file in this process (``local``, or any memory
store given through ``calls=``): the plane's limits drive batching and paging, the
file persists, a file of another dimension is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from langchain_ratatoskr import RatatoskrVectorStore
from langchain_ratatoskr.calls import LocalCalls

from bifrost.errors import Forbidden, InvalidArguments
from ratatoskr.memory import open_memory_store
from ratatoskr.storage.errors import SchemaMismatch

from .conftest import DIM, embeddings


def test_batches_and_pages_follow_the_planes_limits(tmp_path: Path) -> None:
    store = open_memory_store(str(tmp_path / "m.db"), embedding_dim=DIM, max_batch=2, max_page=2)
    scope = {"tenant": "acme"}
    calls = LocalCalls(store, actor="nb", scope=scope, owned=True)
    vs = RatatoskrVectorStore(embeddings(), scope=scope, calls=calls)
    ids = [str(i) for i in range(7)]
    assert vs.add_texts([f"text {i}" for i in ids], ids=ids) == ids  # 4 batches of <= 2
    assert [d.id for d in vs.get_by_ids([*ids, "1", "absent"])] == ids  # each once, in order
    vs.delete(ids[:3])
    assert [d.id for d in vs.get_by_ids(ids)] == ids[3:]
    asyncio.run(vs.aadd_texts(["again"], ids=["0"]))
    assert [d.id for d in asyncio.run(vs.aget_by_ids(ids))] == ["0", *ids[3:]]
    vs.delete()  # scans pages of 2
    assert vs.get_by_ids(ids) == []
    assert store.count() == 0
    vs.close()


def test_local_file_persists_and_scopes_stay_apart(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with RatatoskrVectorStore.local(path, embeddings(), scope={"end_user": "ada"}) as ada:
        ada.add_texts(["ada's"], [{"kind": "x"}], ids=["1"])
    with RatatoskrVectorStore.local(path, embeddings(), scope={"end_user": "bob"}) as bob:
        assert bob.get_by_ids(["1"]) == []
        bob.add_texts(["bob's"], ids=["1"])
        assert [d.page_content for d in bob.similarity_search("x", k=5)] == ["bob's"]
    with RatatoskrVectorStore.local(path, embeddings(), scope={"end_user": "ada"}) as ada:
        assert [d.page_content for d in ada.get_by_ids(["1"])] == ["ada's"]
        # no declared filterable fields: the plane refuses any filter, as in v1
        with pytest.raises(InvalidArguments, match="no filterable fields"):
            ada.similarity_search("x", filter={"kind": "x"})


def test_local_filters_need_declared_fields(tmp_path: Path) -> None:
    with RatatoskrVectorStore.local(
        tmp_path / "m.db", embeddings(), filterable_fields=["metadata.kind"], embedding_dim=DIM
    ) as vs:
        vs.add_texts(["a", "b"], [{"kind": "x"}, {"kind": "y"}], ids=["a", "b"])
        assert [d.id for d in vs.similarity_search("a", k=5, filter={"kind": "y"})] == ["b"]


def test_a_file_of_another_dimension_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    open_memory_store(str(path), embedding_dim=DIM + 1).close()
    with pytest.raises(SchemaMismatch):
        RatatoskrVectorStore.local(path, embeddings())


def test_a_store_given_a_wider_scope_than_its_grant_cannot_write(tmp_path: Path) -> None:
    store = open_memory_store(str(tmp_path / "m.db"), embedding_dim=DIM)
    calls = LocalCalls(store, actor="nb", scope={"tenant": "acme"}, owned=False)
    vs = RatatoskrVectorStore(embeddings(), scope={"tenant": "globex"}, calls=calls)
    with pytest.raises(Forbidden):
        vs.add_texts(["x"], ids=["1"])
    vs.close()  # not owned: the store stays open
    assert store.count() == 0
    store.close()
