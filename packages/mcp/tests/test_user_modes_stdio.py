"""Who a call may reach, through ``ratatoskr mcp`` over stdio and the SDK's own client: by
default a call without ``user_id`` is a tool error and changes nothing, and Alice's calls
never reach Bob's memories; ``--user`` pins every call to one user; only
``--allow-tenant-wide`` lets a call without ``user_id`` reach every user of the tenant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession

from .conftest import all_memories, call, call_error, stdio_session

pytestmark = [pytest.mark.anyio, pytest.mark.slow]  # subprocesses (stdio servers)


async def _alice_and_bob(session: ClientSession) -> str:
    """One memory each; the id of Bob's."""
    await call(session, "remember", text="alice likes green tea", user_id="alice")
    bob = await call(
        session,
        "remember",
        text="bob's diagnosis: a secret",
        user_id="bob",
        metadata={"kind": "medical"},
    )
    return str(bob["id"])


async def _texts(session: ClientSession, **scope: Any) -> list[str]:
    return sorted(m["text"] for m in await all_memories(session, **scope))


async def test_by_default_every_call_names_its_user(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    async with stdio_session(db, "--filterable-fields", "kind") as session:
        bob = await _alice_and_bob(session)
        refused: list[tuple[str, dict[str, Any]]] = [
            ("remember", {"text": "planted"}),
            ("recall", {"query": "diagnosis", "filter": {"kind": "medical"}}),
            ("list_memories", {}),
            ("forget", {"memory_id": bob}),
            ("forget_all", {}),
        ]
        for tool, arguments in refused:
            error = await call_error(session, tool, **arguments)
            assert "memory.invalid_arguments: user_id is required" in error, tool
            assert "diagnosis" not in error and "planted" not in error
        # Alice's calls never reach Bob's memory.
        found = await call(session, "recall", query="bob diagnosis secret", user_id="alice")
        assert [m["text"] for m in found["memories"]] == ["alice likes green tea"]
        assert await _texts(session, user_id="alice") == ["alice likes green tea"]
        assert await call(session, "forget", memory_id=bob, user_id="alice") == {"forgotten": False}
        # Nothing the refused calls named was read, written or erased.
        assert await _texts(session, user_id="bob") == ["bob's diagnosis: a secret"]
    async with stdio_session(db, "--allow-tenant-wide") as session:
        assert await _texts(session) == ["alice likes green tea", "bob's diagnosis: a secret"]


async def test_only_allow_tenant_wide_reaches_every_user(tmp_path: Path) -> None:
    async with stdio_session(tmp_path / "memory.db", "--allow-tenant-wide") as session:
        schema = {t.name: t.inputSchema for t in (await session.list_tools()).tools}
        assert schema["recall"]["required"] == ["query"]
        assert (
            "omit it to reach every memory"
            in schema["recall"]["properties"]["user_id"]["description"]
        )
        assert schema["forget_all"]["required"] == ["user_id"]
        bob = await _alice_and_bob(session)
        found = await call(session, "recall", query="diagnosis", k=10)
        assert {m["user_id"] for m in found["memories"]} == {"alice", "bob"}
        assert "user_id" in await call_error(session, "forget_all")
        assert await call(session, "forget", memory_id=bob) == {"forgotten": True}


async def test_user_pins_every_call_to_one_user(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    async with stdio_session(db) as session:
        bob = await _alice_and_bob(session)
    async with stdio_session(db, "--user", "alice") as session:
        schema = {t.name: t.inputSchema for t in (await session.list_tools()).tools}
        assert schema["recall"]["required"] == ["query"]
        assert schema["forget_all"].get("required", []) == []
        assert schema["recall"]["properties"]["user_id"]["description"].startswith("Omit it")
        kept = await call(session, "remember", text="alice's new note")
        assert await _texts(session) == ["alice likes green tea", "alice's new note"]
        found = await call(session, "recall", query="bob diagnosis secret", k=10)
        assert {m["user_id"] for m in found["memories"]} == {"alice"}
        assert await call(session, "forget", memory_id=bob) == {"forgotten": False}
        for tool, arguments in [
            ("remember", {"text": "planted"}),
            ("recall", {"query": "diagnosis"}),
            ("list_memories", {}),
            ("forget", {"memory_id": bob}),
            ("forget_all", {}),
        ]:
            error = await call_error(session, tool, user_id="bob", **arguments)
            assert "bifrost.forbidden: this call is bound to one user" in error, tool
            assert "bob" not in error
        assert await call(session, "forget", memory_id=kept["id"], user_id="alice") == {
            "forgotten": True
        }
        assert await call(session, "forget_all") == {"forgotten": 1}
    async with stdio_session(db) as session:
        assert await _texts(session, user_id="alice") == []
        assert await _texts(session, user_id="bob") == ["bob's diagnosis: a secret"]
