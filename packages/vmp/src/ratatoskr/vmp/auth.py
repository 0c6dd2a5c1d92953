"""Bearer-key authentication for the VMP plane, as pure ASGI middleware.

Every HTTP request must carry ``Authorization: Bearer <key>``; the token is
compared with ``hmac.compare_digest``. A missing, malformed or wrong header
gets ``401`` with an empty body (and ``WWW-Authenticate: Bearer``) before any
routing, so an unauthenticated caller learns nothing about the routes.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

_UNAUTHORIZED_HEADERS = [
    (b"content-length", b"0"),
    (b"www-authenticate", b"Bearer"),
]


class BearerAuth:
    """Let a request through only with the right bearer key; ``api_key=None`` lets all through."""

    def __init__(
        self, app: ASGIApp, *, api_key: str | None, previous_keys: Sequence[str] = ()
    ) -> None:
        self.app = app
        # The current key and the ones still accepted during a rotation.
        self._keys = (
            () if api_key is None else tuple(k.encode("utf-8") for k in (api_key, *previous_keys))
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._keys or scope["type"] != "http" or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 401, "headers": _UNAUTHORIZED_HEADERS})
        await send({"type": "http.response.body", "body": b""})

    def _authorized(self, scope: Scope) -> bool:
        values = [value for name, value in scope["headers"] if name == b"authorization"]
        if len(values) != 1:
            return False
        scheme, _, token = values[0].strip().partition(b" ")
        if scheme.lower() != b"bearer":
            return False
        presented = token.strip()
        # Every key is compared, so the time taken does not tell which one matched.
        return sum(hmac.compare_digest(presented, key) for key in self._keys) > 0


def is_loopback_host(host: str) -> bool:
    """Whether binding to ``host`` keeps a server reachable from this machine only.

    ``localhost`` and loopback addresses (127.0.0.0/8, ::1) are; anything else,
    including ``0.0.0.0`` and host names, is not.
    """
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
