"""Streamable HTTP for the MCP server: bearer tokens in front, uvicorn underneath.

A server that listens beyond this machine answers only requests carrying one of its
tokens (``Authorization: Bearer <token>``, compared in constant time); on loopback a token
is optional. ``check_listen`` refuses the combination that would expose everyone's
memories to the network: a non-loopback host without a token.

A token file holds one token a line, optionally followed by a user id (``TOKEN USER``):
a request carrying a token bound to a user has every tool call pinned to that user (the
server leaves the user in the ASGI scope's ``state`` for ``server.bound_user``), so one
server can serve several people, each with their own token. An unbound token reaches what
the server's user mode allows.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import socket
import sys
from collections.abc import Mapping

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp.server.fastmcp import FastMCP
from ratatoskr.mcp.server import BOUND_USER_STATE

__all__ = [
    "MCP_PATH",
    "MIN_TOKEN_CHARS",
    "BearerToken",
    "ListenRefused",
    "Tokens",
    "bind_socket",
    "check_listen",
    "http_app",
    "is_loopback",
    "parse_tokens",
    "serve_http",
]

MCP_PATH = "/mcp"
MIN_TOKEN_CHARS = 16
# Bearer token → the user it is bound to (None: unbound).
Tokens = Mapping[str, str | None]


class ListenRefused(ValueError):
    """The host/token combination is unsafe or the token too short (a configuration error)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_tokens(text: str) -> dict[str, str | None]:
    """A token file's lines: ``TOKEN`` or ``TOKEN USER_ID`` (blank lines and ``#``
    comments skipped). Raises ``ListenRefused`` (naming the line, never its token) for
    no token, a token shorter than ``MIN_TOKEN_CHARS``, a line of more than two fields,
    or a token given twice."""
    tokens: dict[str, str | None] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) > 2:
            raise ListenRefused(f"line {number}: expected 'TOKEN' or 'TOKEN USER_ID'")
        token = fields[0]
        if len(token) < MIN_TOKEN_CHARS:
            raise ListenRefused(
                f"line {number}: the bearer token must have at least {MIN_TOKEN_CHARS} characters"
            )
        if token in tokens:
            raise ListenRefused(f"line {number}: the same token twice")
        tokens[token] = fields[1] if len(fields) == 2 else None
    if not tokens:
        raise ListenRefused("no token in the file")
    return tokens


def check_listen(host: str, tokens: Tokens | None) -> None:
    """Raise ``ListenRefused`` for a non-loopback ``host`` without a token, or a token
    shorter than ``MIN_TOKEN_CHARS``."""
    if tokens is not None and any(len(token) < MIN_TOKEN_CHARS for token in tokens):
        raise ListenRefused(f"the bearer token must have at least {MIN_TOKEN_CHARS} characters")
    if not tokens and not is_loopback(host):
        raise ListenRefused(
            f"--host {host} listens beyond this machine: give a bearer token "
            "(--token-file) or listen on 127.0.0.1"
        )


class BearerToken:
    """Pure ASGI: an HTTP request without ``Authorization: Bearer <token>`` of one of
    ``tokens`` gets 401; one with a token bound to a user carries that user in its
    scope's ``state``."""

    def __init__(self, app: ASGIApp, tokens: Tokens) -> None:
        self._app = app
        self._tokens = [(token.encode(), user) for token, user in tokens.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            allowed, user = self._match(scope)
            if not allowed:
                await _unauthorized(send)
                return
            # A fresh state dict for this request: a user never carries over to another.
            state = {k: v for k, v in (scope.get("state") or {}).items() if k != BOUND_USER_STATE}
            if user is not None:
                state[BOUND_USER_STATE] = user
            scope = {**scope, "state": state}
        await self._app(scope, receive, send)

    def _match(self, scope: Scope) -> tuple[bool, str | None]:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, given = bytes(value).partition(b" ")
                given = given.strip()
                found: tuple[bool, str | None] = (False, None)
                # Every token compared, in constant time each: which one matched (or
                # none) takes the same time.
                for token, user in self._tokens:
                    if hmac.compare_digest(given, token):
                        found = (True, user)
                return found if scheme.lower() == b"bearer" else (False, None)
        return False, None


async def _unauthorized(send: Send) -> None:
    body = json.dumps({"error": "unauthorized"}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b"Bearer"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def http_app(server: FastMCP, tokens: Tokens | None) -> ASGIApp:
    """The server's streamable HTTP app at ``MCP_PATH``, behind the tokens when given."""
    app: ASGIApp = server.streamable_http_app()
    return app if not tokens else BearerToken(app, tokens)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv6 when ``host`` is an IPv6 address)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def serve_http(server: FastMCP, sock: socket.socket, tokens: Tokens | None) -> None:
    """Serve on the bound ``sock`` until SIGINT/SIGTERM; one line on stderr says where."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"ratatoskr mcp: streamable HTTP at http://{shown}:{port}{MCP_PATH}", file=sys.stderr)
    sys.stderr.flush()
    config = uvicorn.Config(
        http_app(server, tokens), log_level="warning", access_log=False, lifespan="on"
    )
    uvicorn.Server(config).run(sockets=[sock])
