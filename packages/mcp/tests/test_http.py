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

from ratatoskr.mcp.http import ListenRefused, check_listen, is_loopback
from ratatoskr.provider.testing import ServerProcess, child_env

from .conftest import all_memories, call, http_session, mcp_argv, start_http

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
        assert [m["id"] for m in await all_memories(session)] == [bob["id"]]


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
        assert sorted(m["id"] for m in await all_memories(session)) == sorted(written)
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
        check_listen(host, TOKEN)
    with pytest.raises(ListenRefused, match="at least 16"):
        check_listen("127.0.0.1", "short")
