"""``ratatoskr mcp --http``: the SDK's streamable HTTP client against a real server process
on loopback, its bearer token, concurrent clients, and the refusal to listen beyond this
machine without a token."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from ratatoskr.mcp.http import ListenRefused, check_listen, is_loopback, parse_tokens
from ratatoskr.provider.testing import ServerProcess, child_env

from .conftest import all_memories, call, call_error, http_session, mcp_argv, start_http

TOKEN = "mcp-test-token-0123456789abcdef"


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[ServerProcess]:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    server = start_http(tmp_path, "--token-file", str(token_file))
    yield server
    server.stop(timeout=10)
    server.close()


@pytest.mark.anyio
async def test_remember_recall_and_forget_all_over_http(http_server: ServerProcess) -> None:
    async with http_session(http_server, TOKEN) as session:
        alice = await call(session, "remember", text="alice parks on level 3", user_id="alice")
        bob = await call(session, "remember", text="bob parks on level 5", user_id="bob")
        found = await call(session, "recall", query="where does alice park", user_id="alice")
        assert [m["id"] for m in found["memories"]] == [alice["id"]]
        assert await call(session, "forget", memory_id=bob["id"], user_id="alice") == {
            "forgotten": False
        }
        assert await call(session, "forget_all", user_id="alice") == {"forgotten": 1}
        assert await all_memories(session, user_id="alice") == []
        assert [m["id"] for m in await all_memories(session, user_id="bob")] == [bob["id"]]


@pytest.mark.anyio
async def test_two_http_clients_writing_at_once_lose_nothing(http_server: ServerProcess) -> None:
    written: list[str] = []

    async def client(name: str) -> None:
        async with http_session(http_server, TOKEN) as session:

            async def one(i: int) -> None:
                kept = await call(session, "remember", text=f"{name} {i}", user_id=name)
                written.append(kept["id"])

            async with anyio.create_task_group() as group:
                for i in range(25):
                    group.start_soon(one, i)

    async with anyio.create_task_group() as group:
        for name in ("alice", "bob", "carol"):
            group.start_soon(client, name)
    async with http_session(http_server, TOKEN) as session:
        listed = [
            m["id"]
            for name in ("alice", "bob", "carol")
            for m in await all_memories(session, user_id=name)
        ]
        assert sorted(listed) == sorted(written)
    assert len(written) == 75


def test_requests_without_the_token_get_401(http_server: ServerProcess) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    url = http_server.url("mcp")
    for headers in (
        {},
        {"Authorization": "Bearer wrong-token-0123456789"},
        {"Authorization": TOKEN},
    ):
        answer = httpx.post(url, json=body, headers=headers, timeout=10)
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"] == "Bearer"
        assert TOKEN not in answer.text


@pytest.mark.slow
def test_listening_beyond_loopback_without_a_token_is_refused(tmp_path: Path) -> None:
    argv = mcp_argv("--db", str(tmp_path / "memory.db"), "--http", "--host", "0.0.0.0")
    done = subprocess.run(argv, env=child_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "--host 0.0.0.0" in done.stderr and "--token-file" in done.stderr
    # Refused before anything was opened.
    assert not (tmp_path / "memory.db").exists()


def test_check_listen() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"):
        assert is_loopback(host)
        check_listen(host, None)
    for host in ("0.0.0.0", "::", "192.168.1.4", "example.org"):
        assert not is_loopback(host)
        with pytest.raises(ListenRefused):
            check_listen(host, None)
        check_listen(host, {TOKEN: None})
    with pytest.raises(ListenRefused, match="at least 16"):
        check_listen("127.0.0.1", {"short": None})


ALICE_TOKEN = "alice-token-0123456789abcdef"
BOB_TOKEN = "bob-token-0123456789abcdef"


def test_parse_tokens() -> None:
    text = f"# who may call\n{ALICE_TOKEN} alice\n\n  {BOB_TOKEN}   bob \n{TOKEN}\n"
    assert parse_tokens(text) == {ALICE_TOKEN: "alice", BOB_TOKEN: "bob", TOKEN: None}
    for bad, says in [
        ("", "no token"),
        ("# only a comment\n", "no token"),
        (f"{TOKEN} alice extra\n", "line 1: expected"),
        (f"{TOKEN}\nshort alice\n", "line 2: the bearer token must have at least 16"),
        (f"{TOKEN} alice\n{TOKEN} bob\n", "line 2: the same token twice"),
    ]:
        with pytest.raises(ListenRefused, match=says) as caught:
            parse_tokens(bad)
        assert TOKEN not in str(caught.value)


@pytest.mark.anyio
@pytest.mark.slow
async def test_a_token_bound_to_a_user_reaches_that_users_memories_only(tmp_path: Path) -> None:
    token_file = tmp_path / "tokens"
    token_file.write_text(f"{ALICE_TOKEN} alice\n{BOB_TOKEN} bob\n{TOKEN}\n")
    server = start_http(tmp_path, "--token-file", str(token_file))
    try:
        async with http_session(server, BOB_TOKEN) as bob:
            # Bob's token: every call is Bob's, user_id may be omitted.
            bobs = (await call(bob, "remember", text="bob's diagnosis: a secret"))["id"]
            assert [m["user_id"] for m in await all_memories(bob)] == ["bob"]
        async with http_session(server, ALICE_TOKEN) as alice:
            kept = await call(alice, "remember", text="alice likes green tea")
            found = await call(alice, "recall", query="bob diagnosis secret", k=10)
            assert [m["id"] for m in found["memories"]] == [kept["id"]]
            assert [m["id"] for m in await all_memories(alice)] == [kept["id"]]
            assert await call(alice, "forget", memory_id=bobs) == {"forgotten": False}
            for tool, arguments in [
                ("recall", {"query": "diagnosis"}),
                ("list_memories", {}),
                ("forget", {"memory_id": bobs}),
                ("forget_all", {}),
            ]:
                error = await call_error(alice, tool, user_id="bob", **arguments)
                assert "bifrost.forbidden" in error, tool
            assert await call(alice, "forget_all") == {"forgotten": 1}
        # The unbound token is the server's default mode: every call names its user.
        async with http_session(server, TOKEN) as admin:
            schema = {t.name: t.inputSchema for t in (await admin.list_tools()).tools}
            assert schema["recall"]["required"] == ["query", "user_id"]
            assert "user_id is required" in await call_error(admin, "list_memories")
            assert [m["id"] for m in await all_memories(admin, user_id="bob")] == [bobs]
    finally:
        server.stop(timeout=10)
        server.close()
