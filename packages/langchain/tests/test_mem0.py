"""Mem0 (``mem0ai``, pinned in the dev group) storing and recalling through
RatatoskrVectorStore on a real ``ratatoskr serve``, via Mem0's ``"langchain"`` vector
store provider, with ``infer=False`` (no LLM call) and a local fake embedder. Only
loopback sockets are allowed (pytest-socket): nothing reaches the network."""

from __future__ import annotations

import importlib
import warnings
from pathlib import Path
from typing import Any

import pytest
from langchain_ratatoskr import RatatoskrVectorStore

from bifrost.client import BifrostClient

from .conftest import KEY, embeddings, fresh_scope


def load_mem0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``mem0``, imported with its telemetry off and its home in ``tmp_path`` (both
    read once, at import)."""
    monkeypatch.setenv("MEM0_TELEMETRY", "False")
    monkeypatch.setenv("MEM0_DIR", str(tmp_path / "mem0"))
    with warnings.catch_warnings():
        # Mem0's provider imports langchain-community, which warns at import that it
        # is being sunset.
        warnings.filterwarnings("ignore", "`langchain-community` is being sunset")
        importlib.import_module("langchain_community.vectorstores")
    mem0 = importlib.import_module("mem0")
    assert importlib.import_module("mem0.memory.telemetry").MEM0_TELEMETRY is False
    return mem0


@pytest.mark.allow_hosts(["127.0.0.1"])
@pytest.mark.slow
def test_mem0_remembers_and_recalls_through_ratatoskr(
    memory_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem0 = load_mem0(tmp_path, monkeypatch)
    scope = fresh_scope()
    fake = embeddings()
    store = RatatoskrVectorStore(embedding=fake, url=memory_url, key=KEY, scope=scope)
    memory = mem0.Memory.from_config(
        {
            "vector_store": {"provider": "langchain", "config": {"client": store}},
            "embedder": {"provider": "langchain", "config": {"model": fake}},
            # Never called with infer=False; the client is built at construction.
            "llm": {"provider": "openai", "config": {"api_key": "unused-offline"}},
            "history_db_path": str(tmp_path / "history.db"),
        }
    )
    added = memory.add("Ada takes her tea without sugar", user_id="ada", infer=False)
    (ada_memory,) = added["results"]
    assert ada_memory["event"] == "ADD"
    memory.add("Bob drinks black coffee", user_id="bob", infer=False)

    # Recall: Mem0's user_id filter becomes the plane's metadata filter on
    # metadata.user_id (declared filterable on the test server).
    found = memory.search("Ada takes her tea without sugar", filters={"user_id": "ada"}, top_k=5)
    assert [(r["id"], r["memory"], r["user_id"]) for r in found["results"]] == [
        (ada_memory["id"], "Ada takes her tea without sugar", "ada")
    ]
    assert found["results"][0]["score"] == pytest.approx(1.0)
    bob = memory.search("Bob drinks black coffee", filters={"user_id": "bob"}, top_k=5)
    assert [r["memory"] for r in bob["results"]] == ["Bob drinks black coffee"]
    assert memory.get(ada_memory["id"])["memory"] == "Ada takes her tea without sugar"

    # On the plane: a record in the store's scope, Mem0's payload as its metadata.
    with BifrostClient(memory_url, KEY.encode(), plane="memory", actor="t", scope=scope) as c:
        records = c.call("scan", {"include": {"embedding": False}})["items"]
    by_user = {r["metadata"]["user_id"]: r for r in records}
    assert sorted(by_user) == ["ada", "bob"]
    assert by_user["ada"]["content"] == "Ada takes her tea without sugar"
    assert by_user["ada"]["metadata"]["data"] == "Ada takes her tea without sugar"
    assert by_user["ada"]["id"].endswith("." + ada_memory["id"])

    # (the fake embedder is not semantic: queries repeat a memory's text, score 1.0,
    # above Mem0's relevance threshold)
    memory.delete(ada_memory["id"])
    gone = memory.search("Ada takes her tea without sugar", filters={"user_id": "ada"})
    assert gone["results"] == []
    kept = memory.search("Bob drinks black coffee", filters={"user_id": "bob"})
    assert [r["memory"] for r in kept["results"]] == ["Bob drinks black coffee"]
    # Mem0's "langchain" provider lists only through Chroma's private _collection and
    # returns None otherwise (mem0/vector_stores/langchain.py, list): get_all fails.
    with pytest.raises(TypeError, match="'NoneType' object is not iterable"):
        memory.get_all(filters={"user_id": "bob"})
    store.delete()
    store.close()
