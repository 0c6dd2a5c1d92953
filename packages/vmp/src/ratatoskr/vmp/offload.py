"""Work the app hands to a worker thread (``anyio.to_thread``): store calls, large
parses and the rendering of answers, so none of them stalls the event loop."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread
import orjson
from starlette.responses import Response

_T = TypeVar("_T")


async def in_thread(func: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``func(*args, **kwargs)`` run in a worker thread."""
    return await anyio.to_thread.run_sync(functools.partial(func, *args, **kwargs))


def _rendered(answer: Callable[[], Any]) -> bytes:
    value = answer()
    try:
        return orjson.dumps(value)
    except TypeError:  # an integer beyond 64 bits in metadata: the standard library keeps it
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


async def json_answer(answer: Callable[[], Any]) -> Response:
    """Run ``answer`` (the store call and the shaping of its result) and render its JSON
    in a worker thread: neither a slow store nor a large answer stalls the event loop."""
    content = await anyio.to_thread.run_sync(_rendered, answer)
    return Response(content, media_type="application/json")
