"""``build_server`` in-process: typed failures reach the client as ``code: message`` tool
errors, anything else as one generic line that holds nothing of the call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp.server.fastmcp.exceptions import ToolError

from ratatoskr.mcp.cli import EXIT_FAILED, main
from ratatoskr.mcp.server import build_server
from ratatoskr.mcp.tools import MemoryTools
from ratatoskr.storage.errors import StorageUnavailable

from .conftest import EMBEDDER

pytestmark = pytest.mark.anyio


class Failing:
    def __init__(self, error: Exception) -> None:
        self.error = error
        self.embedding_dim = 64

    def granted(self, grant: dict[str, str]) -> Failing:
        return self

    def call(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error

    def forget(self, scope: dict[str, str]) -> int:
        raise self.error

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (StorageUnavailable("database is locked"), "memory.unavailable: database is locked"),
        (RuntimeError("secret text inside"), "memory.internal: the memory server failed"),
    ],
)
async def test_failures_are_tool_errors(error: Exception, says: str, embedder: Any) -> None:
    server = build_server(MemoryTools(Failing(error), embedder, tenant="acme"))
    with pytest.raises(ToolError) as caught:
        await server.call_tool("remember", {"text": "secret text inside", "user_id": "u"})
    assert says in str(caught.value)
    assert "secret" not in str(caught.value)


async def test_the_tools_in_process(tools: MemoryTools) -> None:
    server = build_server(tools)
    kept = await server.call_tool("remember", {"text": "tea", "user_id": "u"})
    listed = await server.call_tool("list_memories", {"user_id": "u"})
    assert kept and listed


def test_an_unreachable_provider_is_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "key"
    key.write_text("k" * 40)
    argv = ["--url", "http://127.0.0.1:9/memory", "--key-file", str(key)]
    assert main([*argv, "--embedder-factory", EMBEDDER]) == EXIT_FAILED
    assert "cannot be reached" in capsys.readouterr().err


async def test_the_schemas_follow_the_user_mode(tools: MemoryTools) -> None:
    """Required by default; a server whose every HTTP token is bound to a user tells the
    LLM to omit it (``user_mode="pinned"``, what ``ratatoskr mcp`` passes then)."""
    required = {t.name: t.inputSchema for t in await build_server(tools).list_tools()}
    pinned = {
        t.name: t.inputSchema for t in await build_server(tools, user_mode="pinned").list_tools()
    }
    for name in ("remember", "recall", "list_memories", "forget", "forget_all"):
        assert "user_id" in required[name]["required"]
        assert "user_id" not in pinned[name].get("required", [])
        assert pinned[name]["properties"]["user_id"]["description"].startswith("Omit it")
