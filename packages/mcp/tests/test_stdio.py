"""``ratatoskr mcp`` over stdio, driven by the MCP SDK's own client (``stdio_client`` +
``ClientSession``): the five tools by name, remember → recall, per-user erasure, paging,
errors as tool errors, and two server processes on one file written by two clients at
once without losing a memory."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from .conftest import all_memories, call, call_error, stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]  # subprocesses (stdio servers)


async def test_the_sdk_client_sees_the_five_tools_through_ratatoskr_mcp(tmp_path: Path) -> None:
    async with stdio_session(tmp_path / "memory.db", via_provider=True) as session:
        listed = await session.list_tools()
        assert [t.name for t in listed.tools] == [
            "remember",
            "recall",
            "list_memories",
            "forget",
            "forget_all",
        ]
        schema = {t.name: t.inputSchema for t in listed.tools}
        # What the LLM reads: user_id is required by every tool.
        assert schema["remember"]["required"] == ["text", "user_id"]
        assert schema["recall"]["required"] == ["query", "user_id"]
        assert schema["list_memories"]["required"] == ["user_id"]
        assert schema["forget"]["required"] == ["memory_id", "user_id"]
        assert schema["forget_all"]["required"] == ["user_id"]
        for tool in schema.values():
            user_id = tool["properties"]["user_id"]
            assert user_id["type"] == "string" and user_id["minLength"] == 1
            assert user_id["description"].startswith("Required.")
        assert schema["recall"]["properties"]["k"]["default"] == 5
        kept = await call(session, "remember", text="Alice likes green tea", user_id="alice")
        found = await call(session, "recall", query="green tea", user_id="alice")
        assert found["memories"][0]["id"] == kept["id"]
        assert found["memories"][0]["text"] == "Alice likes green tea"
        assert isinstance(found["memories"][0]["score"], float)


async def test_memories_outlive_the_server_and_stay_per_user(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    async with stdio_session(db) as session:
        alice = await call(
            session,
            "remember",
            text="alice: allergic to peanuts",
            user_id="alice",
            metadata={"kind": "health", "since": 2019},
        )
        bob = await call(session, "remember", text="bob: allergic to cats", user_id="bob")
    # A new server process on the same file: everything is still there.
    async with stdio_session(db) as session:
        found = await call(session, "recall", query="allergic", user_id="alice", k=10)
        assert [m["id"] for m in found["memories"]] == [alice["id"]]
        assert found["memories"][0]["metadata"] == {"kind": "health", "since": 2019}
        # Alice's call cannot erase Bob's memory, nor tell it exists.
        assert await call(session, "forget", memory_id=bob["id"], user_id="alice") == {
            "forgotten": False
        }
        assert [m["id"] for m in await all_memories(session, user_id="bob")] == [bob["id"]]
        assert await call(session, "forget_all", user_id="alice") == {"forgotten": 1}
        assert await all_memories(session, user_id="alice") == []
        assert [m["id"] for m in await all_memories(session, user_id="bob")] == [bob["id"]]
        assert await call(session, "forget", memory_id=bob["id"], user_id="bob") == {
            "forgotten": True
        }
        assert await all_memories(session, user_id="bob") == []


async def test_list_memories_pages_and_errors_are_tool_errors(tmp_path: Path) -> None:
    async with stdio_session(tmp_path / "memory.db") as session:
        kept = [
            (await call(session, "remember", text=f"note {i}", user_id="u"))["id"] for i in range(5)
        ]
        first = await call(session, "list_memories", user_id="u", limit=2)
        second = await call(
            session, "list_memories", user_id="u", limit=2, cursor=first["next_cursor"]
        )
        third = await call(
            session, "list_memories", user_id="u", limit=2, cursor=second["next_cursor"]
        )
        assert third["next_cursor"] is None
        pages = [first, second, third]
        assert [m["id"] for p in pages for m in p["memories"]] == sorted(kept)
        error = await call_error(session, "remember", text="", user_id="u")
        assert "memory.invalid_arguments" in error
        error = await call_error(session, "recall", query="note", user_id="u", filter={"kind": 1})
        assert "memory.invalid_filter" in error or "memory.invalid_arguments" in error
        assert len(await all_memories(session, user_id="u")) == 5


async def test_two_servers_on_one_file_and_two_clients_at_once_lose_nothing(
    tmp_path: Path,
) -> None:
    db = tmp_path / "memory.db"
    written: list[str] = []

    async def writer(name: str) -> None:
        # Each client has its own server process; both write the same file at once, and
        # each client sends its calls concurrently too.
        async with stdio_session(db) as session:

            async def one(i: int) -> None:
                kept = await call(session, "remember", text=f"{name} note {i}", user_id=name)
                written.append(kept["id"])

            async with anyio.create_task_group() as group:
                for i in range(30):
                    group.start_soon(one, i)

    async with anyio.create_task_group() as group:
        group.start_soon(writer, "alice")
        group.start_soon(writer, "bob")
    assert len(written) == 60
    async with stdio_session(db, "--allow-tenant-wide") as session:
        listed = await all_memories(session)
        assert sorted(m["id"] for m in listed) == sorted(written)
        assert len(await all_memories(session, user_id="alice")) == 30
