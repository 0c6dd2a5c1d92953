"""The five tools in-process on a local memory file (``MemoryTools`` over ``LocalBackend``):
what each returns, that every call stays inside its tenant and the axes it names, and that
bad input is refused with nothing written. Who a call may reach (a required ``user_id``,
a pinned user, a transport-bound user, tenant-wide calls) is in test_user_modes.py."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from bifrost.errors import InvalidArguments, InvalidFilter
from ratatoskr.embed import EmbedderMismatch
from ratatoskr.mcp.backend import LocalBackend, open_local
from ratatoskr.mcp.tools import MAX_TEXT_CHARS, MemoryTools, metadata_filter

from .conftest import TENANT
from .hash_embedder import HashEmbedder


def _count(backend: LocalBackend) -> int:
    return backend._store.count()


def test_remember_then_recall_finds_it_with_its_metadata(tools: MemoryTools) -> None:
    kept = tools.remember(
        "Alice drinks green tea every morning",
        user_id="alice",
        metadata={"kind": "preference", "n": 1, "tags": ["tea"]},
    )
    tools.remember("The car needs new tyres before winter", user_id="alice")
    found = tools.recall("green tea", user_id="alice")["memories"]
    assert found[0]["id"] == kept["id"]
    assert found[0]["text"] == "Alice drinks green tea every morning"
    assert found[0]["metadata"] == {"kind": "preference", "n": 1, "tags": ["tea"]}
    assert found[0]["user_id"] == "alice" and found[0]["agent_id"] is None
    assert found[0]["score"] > found[1]["score"]


def test_ids_are_fresh_uuid4s(tools: MemoryTools) -> None:
    ids = {tools.remember("same text", user_id="u")["id"] for _ in range(5)}
    assert len(ids) == 5
    assert all(len(i) == 36 and i[14] == "4" for i in ids)


def test_recall_stays_inside_the_user_and_agent_named(
    tools: MemoryTools, wide: MemoryTools
) -> None:
    tools.remember("tea with alice", user_id="alice", agent_id="helper")
    tools.remember("tea with alice, no agent", user_id="alice")
    tools.remember("tea with bob", user_id="bob", agent_id="helper")
    wide.remember("tea for the whole team")
    assert {m["text"] for m in tools.recall("tea", user_id="bob")["memories"]} == {"tea with bob"}
    assert [
        m["text"] for m in tools.recall("tea", user_id="alice", agent_id="helper")["memories"]
    ] == ["tea with alice"]
    # Only where the server allows tenant-wide calls: an agent across users, the tenant.
    assert len(wide.recall("tea", agent_id="helper")["memories"]) == 2
    assert len(wide.recall("tea", k=10)["memories"]) == 4


def test_another_tenant_sees_nothing(backend: LocalBackend, embedder: HashEmbedder) -> None:
    ours = MemoryTools(backend, embedder, tenant=TENANT)
    theirs = MemoryTools(backend, embedder, tenant="globex")
    kept = ours.remember("a secret of acme", user_id="alice")["id"]
    assert theirs.recall("secret", user_id="alice")["memories"] == []
    assert theirs.list_memories(user_id="alice")["memories"] == []
    assert theirs.forget(kept, user_id="alice") == {"forgotten": False}
    assert theirs.forget_all("alice") == {"forgotten": 0}
    # Not even a tenant-wide server of another tenant.
    wide = MemoryTools(backend, embedder, tenant="globex", allow_tenant_wide=True)
    assert wide.list_memories()["memories"] == []
    assert wide.forget(kept) == {"forgotten": False}
    assert [m["id"] for m in ours.list_memories(user_id="alice")["memories"]] == [kept]


def test_forget_of_another_users_memory_does_nothing(tools: MemoryTools) -> None:
    bobs = tools.remember("bob's locker code", user_id="bob")["id"]
    # Alice's call cannot erase it, and its answer is the one an absent id gets.
    assert tools.forget(bobs, user_id="alice") == {"forgotten": False}
    assert tools.forget("no-such-id", user_id="alice") == {"forgotten": False}
    assert [m["id"] for m in tools.list_memories(user_id="bob")["memories"]] == [bobs]
    assert tools.forget(bobs, user_id="bob") == {"forgotten": True}
    assert tools.list_memories(user_id="bob")["memories"] == []
    assert tools.forget(bobs, user_id="bob") == {"forgotten": False}


def test_forget_all_erases_one_user_and_leaves_the_others(
    tools: MemoryTools, wide: MemoryTools, backend: LocalBackend
) -> None:
    for i in range(7):
        tools.remember(f"alice note {i}", user_id="alice", agent_id=f"agent{i % 2}")
    bobs = {tools.remember(f"bob note {i}", user_id="bob")["id"] for i in range(3)}
    shared = wide.remember("team note")["id"]
    assert tools.forget_all("alice") == {"forgotten": 7}
    assert tools.list_memories(user_id="alice")["memories"] == []
    assert {m["id"] for m in tools.list_memories(user_id="bob")["memories"]} == bobs
    assert {m["id"] for m in wide.list_memories()["memories"]} == bobs | {shared}
    assert _count(backend) == 4
    assert tools.forget_all("alice") == {"forgotten": 0}


def test_list_memories_pages_each_memory_once(tools: MemoryTools) -> None:
    kept = {tools.remember(f"note {i}", user_id="alice")["id"] for i in range(7)}
    tools.remember("someone else's", user_id="bob")
    seen: list[str] = []
    cursor = None
    sizes = []
    while True:
        page = tools.list_memories(user_id="alice", cursor=cursor, limit=3)
        sizes.append(len(page["memories"]))
        seen += [m["id"] for m in page["memories"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sizes == [3, 3, 1]
    assert seen == sorted(kept)


def test_recall_filter_is_on_the_callers_metadata(tools: MemoryTools) -> None:
    tools.remember("tea is a preference", user_id="u", metadata={"kind": "preference"})
    tools.remember("tea was on monday", user_id="u", metadata={"kind": "event"})
    found = tools.recall("tea", user_id="u", filter={"kind": "event"})["memories"]
    assert [m["text"] for m in found] == ["tea was on monday"]
    ops = tools.recall("tea", user_id="u", filter={"kind": {"$in": ["preference"]}})
    assert [m["text"] for m in ops["memories"]] == ["tea is a preference"]
    with pytest.raises(InvalidFilter):
        tools.recall("tea", user_id="u", filter={"undeclared": 1})
    assert metadata_filter({"a.b": {"$gt": 1}}) == {"metadata.a.b": {"$gt": 1}}


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"text": ""}, "text"),
        ({"text": "   "}, "text"),
        ({"text": "x" * (MAX_TEXT_CHARS + 1)}, "text"),
        ({"text": "ok", "user_id": ""}, "user_id"),
        ({"text": "ok"}, "user_id"),
        ({"text": "ok", "user_id": "u", "agent_id": ""}, None),
        ({"text": "ok", "user_id": "u", "metadata": ["not", "an", "object"]}, "metadata"),
        ({"text": "ok", "user_id": "u", "metadata": {"bad": float("nan")}}, None),
    ],
)
def test_bad_remember_is_refused_and_writes_nothing(
    tools: MemoryTools, backend: LocalBackend, arguments: dict[str, object], field: str | None
) -> None:
    with pytest.raises(InvalidArguments) as caught:
        tools.remember(**arguments)  # type: ignore[arg-type]
    if field is not None:
        assert caught.value.details["field"] == field
    assert _count(backend) == 0


def test_bad_reads_are_refused(tools: MemoryTools) -> None:
    with pytest.raises(InvalidArguments):
        tools.recall("", user_id="u")
    with pytest.raises(InvalidArguments):
        tools.recall("tea", k=0, user_id="u")
    with pytest.raises(InvalidArguments):
        tools.list_memories(limit=0, user_id="u")
    with pytest.raises(InvalidArguments):
        tools.forget("", user_id="u")
    with pytest.raises(InvalidArguments):
        tools.forget_all("")
    with pytest.raises(InvalidArguments):
        tools.forget_all(None)


def test_a_file_of_another_dimension_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    first = open_local(str(path), HashEmbedder(), actor="test")
    MemoryTools(first, HashEmbedder(), tenant=TENANT).remember("kept", user_id="u")
    first.close()
    before = path.read_bytes()

    class Small(HashEmbedder):
        name = "test:small"
        dim = 32

    with pytest.raises(EmbedderMismatch) as caught:
        open_local(str(path), Small(), actor="test")
    assert (caught.value.store_dim, caught.value.embedder_dim) == (64, 32)
    assert "64" in str(caught.value) and "32" in str(caught.value)
    assert path.read_bytes() == before


def test_tools_refuse_an_embedder_of_another_dimension(backend: LocalBackend) -> None:
    class Small(HashEmbedder):
        dim = 32

    with pytest.raises(EmbedderMismatch):
        MemoryTools(backend, Small(), tenant=TENANT)


def test_concurrent_writers_lose_nothing(
    tools: MemoryTools, wide: MemoryTools, backend: LocalBackend
) -> None:
    ids: list[str] = []
    lock = threading.Lock()

    def write(worker: int) -> None:
        for i in range(25):
            kept = tools.remember(f"worker {worker} note {i}", user_id=f"user{worker % 2}")
            with lock:
                ids.append(kept["id"])

    threads = [threading.Thread(target=write, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    listed = wide.list_memories(limit=1000)["memories"]
    assert sorted(m["id"] for m in listed) == sorted(ids)
    assert len(ids) == 200 == _count(backend)
