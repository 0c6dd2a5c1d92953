"""The request's ASGI edge for the plane apps: the headers the pipeline reads, the
body read under its limit, and the JSON answer sent — straight on the ASGI scope and
messages, without Starlette's request and response objects (their generality was a
fifth of a small call's server CPU: docs/decisions.md)."""

from __future__ import annotations

from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from bifrost.errors import MalformedEnvelope, PayloadTooLarge, Unauthenticated

__all__ = ["Head", "bearer", "declared_size", "read_body", "require_json", "send_json"]


class Head:
    """The request headers the pipeline reads, taken from the ASGI scope in one pass
    (names are lower-case in ASGI; the first of repeated headers counts, as in
    Starlette's ``Headers.get``)."""

    __slots__ = ("authorization", "content_length", "content_type")

    def __init__(self, scope: Scope) -> None:
        self.authorization: str | None = None
        self.content_type: str | None = None
        self.content_length: str | None = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                if self.authorization is None:
                    self.authorization = value.decode("latin-1")
            elif name == b"content-type":
                if self.content_type is None:
                    self.content_type = value.decode("latin-1")
            elif name == b"content-length" and self.content_length is None:
                self.content_length = value.decode("latin-1")


def declared_size(head: Head, limit: int) -> int:
    """The body size to reserve: its Content-Length, else the limit (→ 413 past it)."""
    length = head.content_length
    if length is None:
        return limit
    try:
        declared = int(length)
    except ValueError:
        raise MalformedEnvelope("invalid Content-Length") from None
    if declared > limit:
        raise PayloadTooLarge(f"body larger than {limit} bytes")
    return max(declared, 0)


async def read_body(receive: Receive, limit: int) -> bytes:
    """The body, counted against ``limit`` as it streams in (a missing or lying
    Content-Length; the declared one was judged by :func:`declared_size`); a client
    that disconnects first raises ``ClientDisconnect``."""
    chunks: list[bytes] = []
    total = 0
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "http.request":
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > limit:
                raise PayloadTooLarge(f"body larger than {limit} bytes")
            if chunk:
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        elif kind == "http.disconnect":
            raise ClientDisconnect()
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def require_json(head: Head) -> None:
    """Only ``application/json`` bodies: a web page can send a cross-site POST without
    a CORS preflight only as a form or ``text/plain``, so this alone keeps a browser
    that a hostile page drives from reaching a plane on loopback."""
    media = (head.content_type or "").partition(";")[0].strip().lower()
    if media != "application/json":
        raise MalformedEnvelope("body must be sent as application/json")


def bearer(head: Head) -> str:
    header = head.authorization
    if header is None:
        raise Unauthenticated("token missing")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("authorization must be a Bearer token")
    return token.strip()


async def send_json(send: Send, status: int, content: bytes) -> None:
    """What Starlette's ``Response(content, media_type="application/json")`` sends."""
    headers = [(b"content-length", str(len(content)).encode()), _JSON_TYPE]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})


_JSON_TYPE = (b"content-type", b"application/json")
