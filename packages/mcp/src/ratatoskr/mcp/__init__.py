"""``ratatoskr mcp``: an MCP memory server on ratatoskr's memory plane.

``ratatoskr.mcp.tools.MemoryTools`` holds the five tools (``remember``, ``recall``,
``list_memories``, ``forget``, ``forget_all``) over a ``ratatoskr.mcp.backend`` backend: a
local memory file (``open_local``) or a provider (``RemoteBackend``);
``ratatoskr.mcp.server.build_server`` puts them on the official MCP SDK's server;
``ratatoskr.mcp.cli`` is the command. Nothing is imported here, so the ``ratatoskr``
command can name this one without loading the SDK.
"""
