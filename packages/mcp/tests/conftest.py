"""Fixtures of the MCP server's tests: the tiny test embedder, in-process tools on a local
file, and ``ratatoskr mcp`` started as the SDK's clients start it (stdio) or as a server
(streamable HTTP), each stopped by the test that started it."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from ratatoskr.mcp.backend import LocalBackend, open_local
from ratatoskr.mcp.tools import MemoryTools
from ratatoskr.provider.testing import ServerProcess, child_env, launch

from .hash_embedder import HashEmbedder

HERE = Path(__file__).parent

# The tests' embedder, as the hidden flag names it (a file, so no PYTHONPATH is needed).
EMBEDDER = f"{HERE / 'hash_embedder.py'}:make"
TENANT = "acme"
HTTP_READY = "streamable HTTP at"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture
def backend(tmp_path: Path, embedder: HashEmbedder) -> Iterator[LocalBackend]:
    local = open_local(
        str(tmp_path / "memory.db"), embedder, actor="test", filterable_fields=["metadata.kind"]
    )
    yield local
    local.close()


@pytest.fixture
def tools(backend: LocalBackend, embedder: HashEmbedder) -> MemoryTools:
    return MemoryTools(backend, embedder, tenant=TENANT)


@pytest.fixture
def wide(backend: LocalBackend, embedder: HashEmbedder) -> MemoryTools:
    """The same store's tools where a call may omit ``user_id`` (``--allow-tenant-wide``)."""
    return MemoryTools(backend, embedder, tenant=TENANT, allow_tenant_wide=True)


def mcp_argv(*args: str, via_provider: bool = False) -> list[str]:
    """``python -m ratatoskr.mcp <args>`` with the test embedder (``via_provider``: the
    same through ``ratatoskr mcp``, the provider CLI's hook)."""
    head = ["-m", "ratatoskr.provider", "mcp"] if via_provider else ["-m", "ratatoskr.mcp"]
    return [sys.executable, *head, *args, "--embedder-factory", EMBEDDER]


@asynccontextmanager
async def stdio_session(
    db: Path, *args: str, via_provider: bool = False, embedder: str | None = EMBEDDER
) -> AsyncIterator[ClientSession]:
    """An initialised SDK client session on ``ratatoskr mcp --db db <args>`` over stdio
    (the server process ends when the session closes)."""
    argv = mcp_argv("--db", str(db), "--tenant", TENANT, *args, via_provider=via_provider)
    if embedder is None:
        argv = argv[:-2]
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=child_env())
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def start_http(tmp: Path, *args: str) -> ServerProcess:
    """``ratatoskr mcp --db tmp/memory.db --http --port 0 <args>``, listening."""
    argv = mcp_argv(
        "--db", str(tmp / "memory.db"), "--tenant", TENANT, "--http", "--port", "0", *args
    )
    return launch(argv, env=child_env(), cwd=tmp, ready=lambda line: HTTP_READY in line)


@asynccontextmanager
async def http_session(
    server: ServerProcess, token: str | None = None
) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with (
        httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=300)) as http,
        streamable_http_client(server.url("mcp"), http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> Any:
    """The tool's structured result; fails the test on a tool error."""
    result = await session.call_tool(tool, arguments)
    assert not result.isError, result.content
    if result.structuredContent is not None:
        return result.structuredContent
    return json.loads(result.content[0].text)  # type: ignore[union-attr]


async def call_error(session: ClientSession, tool: str, **arguments: Any) -> str:
    """The text of the tool error the call must end in."""
    result = await session.call_tool(tool, arguments)
    assert result.isError, result.structuredContent
    return str(result.content[0].text)  # type: ignore[union-attr]


async def all_memories(session: ClientSession, **scope: Any) -> list[dict[str, Any]]:
    """Every memory ``list_memories`` shows under ``scope``, page after page."""
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = await call(session, "list_memories", cursor=cursor, limit=50, **scope)
        out += page["memories"]
        cursor = page["next_cursor"]
        if cursor is None:
            return out
