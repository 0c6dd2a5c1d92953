"""``ratatoskr mcp``: its options and how it starts (the provider's CLI hands them here).

A configuration problem ends the command before anything is served with one line on
stderr naming the flag, and exit status 2; a store or provider that cannot be reached,
status 1. stdout belongs to the MCP protocol under stdio: nothing else is printed there.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ratatoskr.embed import Embedder
    from ratatoskr.mcp.backend import MemoryBackend
    from ratatoskr.mcp.tools import UserMode

__all__ = [
    "DESCRIPTION",
    "EXIT_CONFIG",
    "EXIT_FAILED",
    "McpConfigError",
    "add_arguments",
    "main",
    "run",
]

EXIT_CONFIG = 2
EXIT_FAILED = 1
# The provider listens on 8765 by default; an MCP server beside it takes the next port.
DEFAULT_PORT = 8766
DESCRIPTION = (
    "An MCP memory server (tools: remember, recall, list_memories, forget, forget_all) on a "
    "local memory file or a provider's memory plane; stdio, or streamable HTTP with --http."
)


class McpConfigError(Exception):
    """A flag is wrong; the message names it."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``ratatoskr mcp`` on ``p``."""
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--db", metavar="FILE", help="a local memory file (SQLite; created on first use)"
    )
    where.add_argument(
        "--url",
        help="a provider's memory plane instead, e.g. http://127.0.0.1:8765/memory (needs "
        "--key-file)",
    )
    p.add_argument("--key-file", help="with --url: the provider's Heimdall key (a file)")
    p.add_argument(
        "--tenant",
        default="default",
        help="the tenant every call stays inside (default: %(default)s)",
    )
    p.add_argument("--actor", default="mcp", help="who writes, as the store records it")
    who = p.add_mutually_exclusive_group()
    who.add_argument(
        "--user",
        metavar="ID",
        help="serve one person: every call is this user's (its end_user axis), a call "
        "naming another user_id is refused (the mode for a desktop MCP host)",
    )
    who.add_argument(
        "--allow-tenant-wide",
        action="store_true",
        help="let a call omit user_id and reach the whole tenant: every user's memories "
        "and the shared ones (only for a single-user or an admin setup; by default every "
        "call must name its user)",
    )
    p.add_argument(
        "--filterable-fields",
        default="",
        help="with --db: metadata fields recall's filter may name, comma-separated "
        "(e.g. kind,topic)",
    )
    p.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    p.add_argument("--host", default="127.0.0.1", help="with --http (default: %(default)s)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="with --http; 0: any free port")
    p.add_argument(
        "--token-file",
        help="with --http: the bearer tokens clients must send (required beyond loopback), "
        "one a line, each optionally followed by the user id it is bound to: 'TOKEN' or "
        "'TOKEN USER_ID' (a bound token's calls are that user's only)",
    )
    # Tests: a module:attribute or file.py:attribute making an Embedder, instead of
    # RATATOSKR_EMBEDDER's choice.
    p.add_argument("--embedder-factory", help=argparse.SUPPRESS)


def _read_secret(path: str, flag: str) -> str:
    try:
        value = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise McpConfigError(f"{flag}: cannot read {path} ({type(exc).__name__})") from None
    if not value:
        raise McpConfigError(f"{flag}: {path} is empty")
    return value


def _embedder(spec: str | None) -> Embedder:
    from ratatoskr.embed import Embedder, build_embedder  # noqa: PLC0415

    if spec is None:
        return build_embedder()
    where, _, attr = spec.rpartition(":")
    try:
        if where.endswith(".py"):
            loader = importlib.util.spec_from_file_location("_ratatoskr_mcp_embedder", where)
            if loader is None or loader.loader is None:
                raise ImportError(where)
            module = importlib.util.module_from_spec(loader)
            loader.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
        made: Any = getattr(module, attr)()
    except (ImportError, OSError, AttributeError) as exc:
        raise McpConfigError(
            f"--embedder-factory: cannot load {spec} ({type(exc).__name__})"
        ) from None
    if not isinstance(made, Embedder):
        raise McpConfigError("--embedder-factory: does not make an Embedder")
    return made


def _fields(value: str) -> tuple[str, ...]:
    return tuple(f"metadata.{name.strip()}" for name in value.split(",") if name.strip())


def _backend(args: argparse.Namespace, embedder: Embedder) -> MemoryBackend:
    from ratatoskr.mcp.backend import RemoteBackend, open_local  # noqa: PLC0415

    if args.db is not None:
        if args.key_file is not None:
            raise McpConfigError("--key-file goes with --url, not --db")
        path = Path(args.db)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        return open_local(
            str(path), embedder, actor=args.actor, filterable_fields=_fields(args.filterable_fields)
        )
    if args.key_file is None:
        raise McpConfigError("--url needs --key-file (the provider's Heimdall key)")
    if args.filterable_fields:
        raise McpConfigError(
            "--filterable-fields goes with --db; a provider declares its own "
            "(RATATOSKR_MEMORY_FILTERABLE_FIELDS, e.g. metadata.kind)"
        )
    key = _read_secret(args.key_file, "--key-file").encode()
    return RemoteBackend(args.url, key, actor=args.actor)


def _listen(args: argparse.Namespace) -> tuple[dict[str, str | None] | None, UserMode | None]:
    """The HTTP bearer tokens (None: none asked for) and the user mode they impose
    (``pinned`` when every token is bound to a user), the listen flags checked."""
    from ratatoskr.mcp.http import ListenRefused, check_listen, parse_tokens  # noqa: PLC0415

    if not args.http and (
        args.token_file is not None or args.port != DEFAULT_PORT or args.host != "127.0.0.1"
    ):
        raise McpConfigError("--host, --port and --token-file go with --http")
    tokens = None
    if args.token_file is not None:
        try:
            tokens = parse_tokens(_read_secret(args.token_file, "--token-file"))
        except ListenRefused as exc:
            raise McpConfigError(f"--token-file: {exc}") from None
    if args.http:
        try:
            check_listen(args.host, tokens)
        except ListenRefused as exc:
            raise McpConfigError(str(exc)) from None
    if args.user is not None and not args.user.strip():
        raise McpConfigError("--user: give the id of the user this server serves")
    bound = [user for user in (tokens or {}).values() if user is not None]
    if bound and args.user is not None:
        raise McpConfigError("--user pins every call already: bind no token to a user")
    # Every token bound to a user: the LLM is told to omit user_id, as under --user.
    return tokens, "pinned" if tokens and len(bound) == len(tokens) else None


def _start(args: argparse.Namespace) -> int:
    from ratatoskr.mcp.http import bind_socket, serve_http  # noqa: PLC0415
    from ratatoskr.mcp.server import build_server  # noqa: PLC0415
    from ratatoskr.mcp.tools import MemoryTools  # noqa: PLC0415

    tokens, mode = _listen(args)
    embedder = _embedder(args.embedder_factory)
    # Memory files hold what agents remember about people: owner-only.
    os.umask(0o077)
    backend = _backend(args, embedder)
    try:
        tools = MemoryTools(
            backend,
            embedder,
            tenant=args.tenant,
            actor=args.actor,
            user=args.user,
            allow_tenant_wide=args.allow_tenant_wide,
        )
        server = build_server(tools, host=args.host, port=args.port, user_mode=mode)
        if not args.http:
            server.run("stdio")
            return 0
        sock = bind_socket(args.host, args.port)
        try:
            serve_http(server, sock, tokens)
        finally:
            sock.close()
        return 0
    finally:
        backend.close()


def run(args: argparse.Namespace) -> int:
    """Start the server ``args`` describe; its exit status."""
    # Imported here: building the ``ratatoskr`` parser must not load the SDK and the stores.
    import httpx  # noqa: PLC0415

    from bifrost.errors import BifrostError  # noqa: PLC0415
    from ratatoskr.embed import EmbedderError  # noqa: PLC0415
    from ratatoskr.storage.errors import StorageError  # noqa: PLC0415

    try:
        return _start(args)
    except (McpConfigError, EmbedderError) as exc:
        print(f"ratatoskr mcp: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except BifrostError as exc:
        print(f"ratatoskr mcp: {exc.wire_code('memory')}: {exc.message}", file=sys.stderr)
        return EXIT_CONFIG if exc.status == 400 else EXIT_FAILED
    except httpx.HTTPError as exc:
        print(
            f"ratatoskr mcp: the provider cannot be reached ({type(exc).__name__})", file=sys.stderr
        )
        return EXIT_FAILED
    except (StorageError, OSError) as exc:
        print(f"ratatoskr mcp: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED


def main(argv: list[str] | None = None) -> int:
    """``python -m ratatoskr.mcp``: the same command without the provider's CLI."""
    p = argparse.ArgumentParser(prog="ratatoskr mcp", description=DESCRIPTION)
    add_arguments(p)
    return run(p.parse_args(argv))
