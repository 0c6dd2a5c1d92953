"""Request bodies: their media type, their size cap and strict JSON objects.

JSON routes take only ``application/json`` and the snapshot upload only
``application/octet-stream`` (415 otherwise): a browser can send neither cross-site
without a CORS preflight, which the plane never grants, so even without a key
(loopback only) a web page cannot write.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from starlette.requests import Request

from ratatoskr.vmp.canonical import strict_loads
from ratatoskr.vmp.errors import InvalidArgument, UnsupportedMediaType
from ratatoskr.vmp.offload import in_thread

JSON_TYPE = "application/json"
SNAPSHOT_TYPE = "application/octet-stream"
# Bodies above this are parsed off the event loop.
_PARSE_INLINE_BYTES = 256 * 1024
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def require_type(request: Request, wanted: str) -> None:
    """Refuse a body whose media type is not ``wanted`` (parameters such as charset allowed)."""
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != wanted:
        raise UnsupportedMediaType(f"this route takes a body of Content-Type {wanted}")


def declared_length(request: Request) -> int | None:
    """The request's Content-Length; None when it has none (chunked)."""
    # The server has already refused a malformed Content-Length.
    declared = request.headers.get("content-length", "")
    return int(declared) if declared.isdigit() else None


async def _read_body(request: Request, limit: int) -> bytes:
    declared = declared_length(request)
    if declared is not None and declared > limit:
        raise InvalidArgument(f"request body exceeds {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise InvalidArgument(f"request body exceeds {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def json_object(
    request: Request, limit: int, *, required: Collection[str], optional: Collection[str] = ()
) -> dict[str, Any]:
    """The request's body: one JSON object of at most ``limit`` bytes with every
    ``required`` field and no field but those and the ``optional`` ones."""
    require_type(request, JSON_TYPE)
    raw = await _read_body(request, limit)
    body = (
        strict_loads(raw) if len(raw) <= _PARSE_INLINE_BYTES else await in_thread(strict_loads, raw)
    )
    if not isinstance(body, dict):
        raise InvalidArgument("request body must be a JSON object")
    for name in body:
        if name not in required and name not in optional:
            shown = f" {name!r}" if _FIELD_NAME.fullmatch(name) else ""
            raise InvalidArgument(f"unknown field{shown} in request body")
    for name in required:
        if name not in body:
            raise InvalidArgument(f"{name} is required")
    return body
