"""The MCP server: the five memory tools on the official SDK's ``FastMCP``.

Tool functions are synchronous: the SDK runs each call in a worker thread, so calls of
concurrent clients (HTTP) embed and reach the store at the same time, and a slow embedder
never blocks the event loop. A failure reaches the client as a tool error carrying its
code and message (which never hold a memory's text, an embedding or a scope value);
anything unexpected is one generic line, logged by type only. What the tools' schemas
say about ``user_id`` follows the server's user mode: required by default.
"""

from __future__ import annotations

import copy
import functools
import logging
from collections.abc import Callable
from typing import Annotated, Any, ParamSpec, TypeVar

from pydantic import Field

from bifrost.errors import BifrostError
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.fastmcp.tools import Tool
from ratatoskr.embed import EmbedderError
from ratatoskr.mcp.tools import (
    ForgetAllResult,
    ForgetResult,
    MemoryPage,
    MemoryTools,
    RecallResult,
    RememberResult,
    UserMode,
)
from ratatoskr.storage.errors import StorageError

__all__ = ["BOUND_USER_STATE", "SERVER_NAME", "bound_user", "build_server"]

SERVER_NAME = "ratatoskr-memory"
_log = logging.getLogger("ratatoskr.mcp")
_P = ParamSpec("_P")
_T = TypeVar("_T")

_INSTRUCTIONS = (
    "Long-term memory. `remember` stores a text (with optional metadata) and returns its "
    "id; `recall` finds the memories closest in meaning to a query; `list_memories` pages "
    "through them; `forget` erases one by id; `forget_all` erases everything of one user. "
    "Pass the user_id of the person the conversation is with (and agent_id, if you use "
    "one) on every call: a call only ever sees and changes the memories of the user and "
    "agent it names."
)
_INSTRUCTIONS_PINNED = (
    "Long-term memory of the one person this server serves. `remember` stores a text "
    "(with optional metadata) and returns its id; `recall` finds the memories closest in "
    "meaning to a query; `list_memories` pages through them; `forget` erases one by id; "
    "`forget_all` erases all of them. Omit user_id: every call is this person's."
)

# What the LLM reads about `user_id`, by the server's user mode (see MemoryTools).
_USER_ID_SAYS: dict[UserMode, str] = {
    "required": "Required. The person whose memories this call reads or writes; the call "
    "sees and changes only that person's memories.",
    "pinned": "Omit it: this server serves one person and every call is theirs (another "
    "user_id is refused).",
    "tenant_wide": "The person whose memories this call reads or writes; omit it to reach "
    "every memory of the tenant (shared ones and every person's).",
}
_FORGET_ALL_USER_SAYS: dict[UserMode, str] = {
    "required": "Required. The person whose memories are all erased.",
    "pinned": _USER_ID_SAYS["pinned"],
    "tenant_wide": "Required. The person whose memories are all erased.",
}

# Where the HTTP transport leaves the user a request's bearer token is bound to (in the
# ASGI scope's ``state``); ``bound_user`` reads it back in the tool call.
BOUND_USER_STATE = "ratatoskr_mcp_user"

UserId = Annotated[str | None, Field(description=_USER_ID_SAYS["tenant_wide"])]
AgentId = Annotated[
    str | None, Field(description="The agent whose own memory this is; omit for any agent.")
]
Ctx = Context[Any, Any, Any]


def bound_user(ctx: Ctx) -> str | None:
    """The user the transport bound this call to (an HTTP token's user), if any."""
    try:
        request = ctx.request_context.request
    except ValueError:  # called in-process, outside any request
        return None
    scope = getattr(request, "scope", None)
    state = scope.get("state") if isinstance(scope, dict) else None
    user = state.get(BOUND_USER_STATE) if isinstance(state, dict) else None
    return user if isinstance(user, str) else None


def _advertise_user(tool: Tool, mode: UserMode) -> Tool:
    """``tool``'s input schema as the LLM should read it in ``mode``: ``user_id``
    required (a non-empty string) unless the server is pinned or tenant-wide. The
    arguments are still validated as optional: a missing user is refused by
    ``MemoryTools`` with a message naming the argument and nothing of the call."""
    schema = copy.deepcopy(tool.parameters)
    prop = schema["properties"]["user_id"]
    required = [name for name in schema.get("required", []) if name != "user_id"]
    says = _FORGET_ALL_USER_SAYS if tool.name == "forget_all" else _USER_ID_SAYS
    # forget_all always names its user, except where the server has pinned it.
    if mode == "required" or (mode == "tenant_wide" and tool.name == "forget_all"):
        schema["properties"]["user_id"] = {
            "type": "string",
            "minLength": 1,
            "title": prop.get("title", "User Id"),
            "description": says[mode],
        }
        required.append("user_id")
    else:
        prop["description"] = says[mode]
    schema["required"] = required
    return tool.model_copy(update={"parameters": schema})


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


class _ToolCalls:
    """The five tools as the SDK sees them (each method's signature is the tool's input
    schema): each passes its arguments, and the user the transport bound the call to,
    to ``MemoryTools``."""

    def __init__(self, tools: MemoryTools) -> None:
        self._tools = tools

    @_tool_errors
    def remember(
        self,
        ctx: Ctx,
        text: Annotated[str, Field(description="What to remember, in plain words.")],
        user_id: UserId = None,
        agent_id: AgentId = None,
        metadata: Annotated[
            dict[str, Any] | None,
            Field(description="Any JSON object kept with the memory, returned verbatim."),
        ] = None,
    ) -> RememberResult:
        """Store a new memory; returns its id."""
        return self._tools.remember(
            text, user_id=user_id, agent_id=agent_id, metadata=metadata, as_user=bound_user(ctx)
        )

    @_tool_errors
    def recall(
        self,
        ctx: Ctx,
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
        return self._tools.recall(
            query, k=k, user_id=user_id, agent_id=agent_id, filter=filter, as_user=bound_user(ctx)
        )

    @_tool_errors
    def list_memories(
        self,
        ctx: Ctx,
        user_id: UserId = None,
        agent_id: AgentId = None,
        cursor: Annotated[
            str | None, Field(description="next_cursor of the page before; omit for the first.")
        ] = None,
        limit: Annotated[int, Field(description="Memories per page.", ge=1)] = 20,
    ) -> MemoryPage:
        """One page of memories; pass next_cursor back as cursor for the next page."""
        return self._tools.list_memories(
            user_id=user_id, agent_id=agent_id, cursor=cursor, limit=limit, as_user=bound_user(ctx)
        )

    @_tool_errors
    def forget(
        self,
        ctx: Ctx,
        memory_id: Annotated[str, Field(description="The id remember returned.")],
        user_id: UserId = None,
        agent_id: AgentId = None,
    ) -> ForgetResult:
        """Erase one memory; forgotten is false when no such memory is visible to this call."""
        return self._tools.forget(
            memory_id, user_id=user_id, agent_id=agent_id, as_user=bound_user(ctx)
        )

    @_tool_errors
    def forget_all(self, ctx: Ctx, user_id: UserId = None) -> ForgetAllResult:
        """Erase every memory of one user (every agent's); returns how many were erased."""
        return self._tools.forget_all(user_id, as_user=bound_user(ctx))


def build_server(
    tools: MemoryTools,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    user_mode: UserMode | None = None,
) -> FastMCP:
    """A ``FastMCP`` server exposing ``tools``; ``host``/``port`` only matter to its
    streamable HTTP app (the SDK turns on its DNS-rebinding checks for a loopback host).
    ``user_mode`` (default: the tools') is what the tools' descriptions tell the LLM about
    ``user_id``: ``pinned`` where every HTTP token is bound to a user."""
    mode = user_mode or tools.user_mode
    calls = _ToolCalls(tools)
    return FastMCP(
        SERVER_NAME,
        instructions=_INSTRUCTIONS_PINNED if mode == "pinned" else _INSTRUCTIONS,
        host=host,
        port=port,
        log_level="WARNING",
        tools=[
            _advertise_user(Tool.from_function(fn), mode)
            for fn in (
                calls.remember,
                calls.recall,
                calls.list_memories,
                calls.forget,
                calls.forget_all,
            )
        ],
    )
