"""Streamable HTTP for the MCP server: a bearer token in front, uvicorn underneath.

A server that listens beyond this machine answers only requests carrying its token
(``Authorization: Bearer <token>``, compared in constant time); on loopback the token is
optional. ``check_listen`` refuses the combination that would expose everyone's memories
to the network: a non-loopback host without a token.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import socket
import sys

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp.server.fastmcp import FastMCP

__all__ = [
    "MCP_PATH",
    "MIN_TOKEN_CHARS",
    "BearerToken",
    "ListenRefused",
    "bind_socket",
    "check_listen",
    "http_app",
    "is_loopback",
    "serve_http",
]

MCP_PATH = "/mcp"
MIN_TOKEN_CHARS = 16


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


def check_listen(host: str, token: str | None) -> None:
    """Raise ``ListenRefused`` for a non-loopback ``host`` without a token, or a token
    shorter than ``MIN_TOKEN_CHARS``."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ListenRefused(f"the bearer token must have at least {MIN_TOKEN_CHARS} characters")
    if token is None and not is_loopback(host):
        raise ListenRefused(
            f"--host {host} listens beyond this machine: give a bearer token "
            "(--token-file) or listen on 127.0.0.1"
        )


class BearerToken:
    """Pure ASGI: an HTTP request without ``Authorization: Bearer <token>`` gets 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._allowed(scope):
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
            return
        await self._app(scope, receive, send)

    def _allowed(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, given = bytes(value).partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(
                    given.strip(), self._token
                )
        return False


def http_app(server: FastMCP, token: str | None) -> ASGIApp:
    """The server's streamable HTTP app at ``MCP_PATH``, behind the token when given."""
    app: ASGIApp = server.streamable_http_app()
    return app if token is None else BearerToken(app, token)


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


def serve_http(server: FastMCP, sock: socket.socket, token: str | None) -> None:
    """Serve on the bound ``sock`` until SIGINT/SIGTERM; one line on stderr says where."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"ratatoskr mcp: streamable HTTP at http://{shown}:{port}{MCP_PATH}", file=sys.stderr)
    sys.stderr.flush()
    config = uvicorn.Config(
        http_app(server, token), log_level="warning", access_log=False, lifespan="on"
    )
    uvicorn.Server(config).run(sockets=[sock])
