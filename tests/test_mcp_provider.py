"""``ratatoskr mcp --url … --key-file …``: the MCP server on a real provider's memory plane,
driven by the MCP SDK's stdio client. Every call reaches the provider with a token minted
for exactly its grant (tenant + the user/agent it names): per-user recall, forget and
forget_all hold on the provider's side, and a dimension the provider does not hold stops
the command."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from bifrost.client import BifrostClient
from ratatoskr.provider.testing import ServerProcess, child_env

from .conftest import KEY, start_server

ROOT = Path(__file__).resolve().parents[1]
EMBEDDER = f"{ROOT / 'packages/mcp/tests/hash_embedder.py'}:make"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[ServerProcess]:
    env = {
        "RATATOSKR_MEMORY_DB": str(tmp_path / "memory.db"),
        "RATATOSKR_AFFECT_DB": str(tmp_path / "affect.db"),
        "RATATOSKR_VMP_DB": str(tmp_path / "vmp.db"),
        "RATATOSKR_MEMORY_EMBEDDING_DIM": "64",
        "RATATOSKR_HEIMDALL_KEY": KEY,
        "RATATOSKR_VMP_API_KEY": "e2e-vmp-key-0123456789",
        "RATATOSKR_PORT": "0",
        "RATATOSKR_MEMORY_FILTERABLE_FIELDS": "metadata.kind",
    }
    server = start_server(["serve", "--plane", "memory"], env, tmp_path)
    yield server
    server.stop(timeout=10)
    server.close()


def _argv(url: str, key_file: Path, tenant: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ratatoskr.provider",
        "mcp",
        "--url",
        url,
        "--key-file",
        str(key_file),
        "--tenant",
        tenant,
        "--embedder-factory",
        EMBEDDER,
    ]


@asynccontextmanager
async def session_on(
    provider: ServerProcess, tmp_path: Path, tenant: str = "acme"
) -> AsyncIterator[ClientSession]:
    key_file = tmp_path / "heimdall.key"
    key_file.write_text(KEY + "\n")
    argv = _argv(provider.base_url, key_file, tenant)
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=child_env())
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> Any:
    result = await session.call_tool(tool, arguments)
    assert not result.isError, result.content
    return result.structuredContent


@pytest.mark.anyio
@pytest.mark.slow
async def test_mcp_on_a_provider_stays_inside_each_calls_grant(
    provider: ServerProcess, tmp_path: Path
) -> None:
    async with session_on(provider, tmp_path) as session:
        alice = await call(
            session,
            "remember",
            text="alice: dentist on friday",
            user_id="alice",
            metadata={"kind": "event"},
        )
        await call(
            session,
            "remember",
            text="alice: likes dentist jokes",
            user_id="alice",
            metadata={"kind": "preference"},
        )
        bob = [
            (await call(session, "remember", text=f"bob note {i}", user_id="bob"))["id"]
            for i in range(3)
        ]
        found = await call(
            session, "recall", query="dentist", user_id="alice", filter={"kind": "event"}
        )
        assert [m["id"] for m in found["memories"]] == [alice["id"]]
        assert (await call(session, "recall", query="dentist", user_id="bob"))["memories"][0][
            "text"
        ].startswith("bob")
        first = await call(session, "list_memories", user_id="bob", limit=2)
        rest = await call(session, "list_memories", user_id="bob", cursor=first["next_cursor"])
        assert [m["id"] for m in first["memories"] + rest["memories"]] == sorted(bob)
        assert rest["next_cursor"] is None
        assert await call(session, "forget", memory_id=bob[0], user_id="alice") == {
            "forgotten": False
        }
        assert await call(session, "forget_all", user_id="alice") == {"forgotten": 2}
    # Another tenant's server on the same provider sees nothing and erases nothing.
    async with session_on(provider, tmp_path, tenant="globex") as other:
        assert (await call(other, "list_memories", user_id="bob"))["memories"] == []
        assert await call(other, "forget_all", user_id="bob") == {"forgotten": 0}
    with BifrostClient(provider.base_url, KEY.encode(), actor="t", plane="memory") as client:
        left = client.scan(include={"embedding": False})["items"]
    assert sorted(r["id"] for r in left) == sorted(bob)
    assert {json.dumps(r["scope"], sort_keys=True) for r in left} == {
        json.dumps({"end_user": "bob", "tenant": "acme"}, sort_keys=True)
    }


@pytest.mark.slow
def test_a_provider_of_another_dimension_stops_the_command(tmp_path: Path) -> None:
    env = {
        "RATATOSKR_MEMORY_DB": str(tmp_path / "memory.db"),
        "RATATOSKR_MEMORY_EMBEDDING_DIM": "8",
        "RATATOSKR_HEIMDALL_KEY": KEY,
        "RATATOSKR_PORT": "0",
    }
    server = start_server(["serve", "--plane", "memory"], env, tmp_path)
    try:
        key_file = tmp_path / "heimdall.key"
        key_file.write_text(KEY)
        done = subprocess.run(
            _argv(server.base_url, key_file, "acme"),
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.stop(timeout=10)
        server.close()
    assert done.returncode == 2
    assert "8-dimensional" in done.stderr and "64-dimensional" in done.stderr
