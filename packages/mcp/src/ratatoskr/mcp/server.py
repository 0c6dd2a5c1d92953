"""The MCP server: the five memory tools on the official SDK's ``FastMCP``.

Tool functions are synchronous: the SDK runs each call in a worker thread, so calls of
concurrent clients (HTTP) embed and reach the store at the same time, and a slow embedder
never blocks the event loop. A failure reaches the client as a tool error carrying its
code and message (which never hold a memory's text, an embedding or a scope value);
anything unexpected is one generic line, logged by type only.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Annotated, Any, ParamSpec, TypeVar

from pydantic import Field

from bifrost.errors import BifrostError
from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from ratatoskr.embed import EmbedderError
from ratatoskr.mcp.tools import (
    ForgetAllResult,
    ForgetResult,
    MemoryPage,
    MemoryTools,
    RecallResult,
    RememberResult,
)
from ratatoskr.storage.errors import StorageError

__all__ = ["SERVER_NAME", "build_server"]

SERVER_NAME = "ratatoskr-memory"
_log = logging.getLogger("ratatoskr.mcp")
_P = ParamSpec("_P")
_T = TypeVar("_T")

_INSTRUCTIONS = (
    "Long-term memory. `remember` stores a text (with optional metadata) and returns its "
    "id; `recall` finds the memories closest in meaning to a query; `list_memories` pages "
    "through them; `forget` erases one by id; `forget_all` erases everything of one user. "
    "Pass the same user_id (and agent_id, if you use one) on every call: a call only ever "
    "sees and changes the memories of the user and agent it names."
)

UserId = Annotated[
    str | None,
    Field(description="The person the memory is about or belongs to; omit for shared ones."),
]
AgentId = Annotated[
    str | None, Field(description="The agent whose own memory this is; omit for any agent.")
]


def _tool_errors(fn: Callable[_P, _T]) -> Callable[_P, _T]:
    """Typed failures as tool errors (``code: message``); others as one generic line."""

    @functools.wraps(fn)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return fn(*args, **kwargs)
        except BifrostError as exc:
            raise ToolError(f"{exc.wire_code('memory')}: {exc.message}") from None
        except EmbedderError as exc:
            raise ToolError(f"{exc.code}: {exc}") from None
        except StorageError as exc:
            raise ToolError(f"memory.unavailable: {exc.message}") from None
        except Exception as exc:
            _log.exception("tool %s failed (%s)", fn.__name__, type(exc).__name__)
            raise ToolError("memory.internal: the memory server failed; see its log") from None

    return run


def build_server(tools: MemoryTools, *, host: str = "127.0.0.1", port: int = 8000) -> FastMCP:
    """A ``FastMCP`` server exposing ``tools``; ``host``/``port`` only matter to its
    streamable HTTP app (the SDK turns on its DNS-rebinding checks for a loopback host)."""
    server: FastMCP = FastMCP(
        SERVER_NAME, instructions=_INSTRUCTIONS, host=host, port=port, log_level="WARNING"
    )

    @server.tool()
    @_tool_errors
    def remember(
        text: Annotated[str, Field(description="What to remember, in plain words.")],
        user_id: UserId = None,
        agent_id: AgentId = None,
        metadata: Annotated[
            dict[str, Any] | None,
            Field(description="Any JSON object kept with the memory, returned verbatim."),
        ] = None,
    ) -> RememberResult:
        """Store a new memory; returns its id."""
        return tools.remember(text, user_id=user_id, agent_id=agent_id, metadata=metadata)

    @server.tool()
    @_tool_errors
    def recall(
        query: Annotated[str, Field(description="What to look for, in plain words.")],
        k: Annotated[int, Field(description="How many memories at most.", ge=1)] = 5,
        user_id: UserId = None,
        agent_id: AgentId = None,
        filter: Annotated[
            dict[str, Any] | None,
            Field(
                description="Conditions on metadata fields the server declares filterable, "
                'e.g. {"kind": "preference"} or {"year": {"$gte": 2020}}.'
            ),
        ] = None,
    ) -> RecallResult:
        """The memories closest in meaning to the query, best first, with their scores."""
        return tools.recall(query, k=k, user_id=user_id, agent_id=agent_id, filter=filter)

    @server.tool()
    @_tool_errors
    def list_memories(
        user_id: UserId = None,
        agent_id: AgentId = None,
        cursor: Annotated[
            str | None, Field(description="next_cursor of the page before; omit for the first.")
        ] = None,
        limit: Annotated[int, Field(description="Memories per page.", ge=1)] = 20,
    ) -> MemoryPage:
        """One page of memories; pass next_cursor back as cursor for the next page."""
        return tools.list_memories(user_id=user_id, agent_id=agent_id, cursor=cursor, limit=limit)

    @server.tool()
    @_tool_errors
    def forget(
        memory_id: Annotated[str, Field(description="The id remember returned.")],
        user_id: UserId = None,
        agent_id: AgentId = None,
    ) -> ForgetResult:
        """Erase one memory; forgotten is false when no such memory is visible to this call."""
        return tools.forget(memory_id, user_id=user_id, agent_id=agent_id)

    @server.tool()
    @_tool_errors
    def forget_all(
        user_id: Annotated[str, Field(description="The user whose memories are all erased.")],
    ) -> ForgetAllResult:
        """Erase every memory of one user (every agent's); returns how many were erased."""
        return tools.forget_all(user_id)

    return server
