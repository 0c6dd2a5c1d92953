"""The VMP v0 HTTP surface: exactly the routes, bodies and status codes of the spec.

``build_vmp_app(store, api_key=…)`` returns a Starlette app; it has no
lifespan and no module-level state. Store calls run in a worker thread
(``anyio.to_thread.run_sync``) so a slow call never blocks the event loop.
Every failure is rendered here, once, as ``{"error": message, "code": CODE}``
— including unknown routes (404 NOT_FOUND) and wrong methods (405 with code
INVALID_ARGUMENT) — except authentication failures, which are 401 with an
empty body (see :mod:`ratatoskr.vmp.auth`).

Bodies are typed: JSON routes take only ``application/json``, the snapshot
upload only ``application/octet-stream`` (415 otherwise). A browser can send
neither cross-site without a CORS preflight, which the plane never grants, so
even without a key (loopback only) a web page cannot write. A snapshot upload
is capped (413) and spooled to an unnamed temporary file, never held in memory.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import tempfile
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import IO, Any, TypeVar

import anyio
import anyio.to_thread
import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ratatoskr.vmp.auth import BearerAuth
from ratatoskr.vmp.canonical import strict_loads
from ratatoskr.vmp.errors import (
    CapacityExceeded,
    InternalError,
    InvalidArgument,
    NotFound,
    PayloadTooLarge,
    UnsupportedMediaType,
    VmpError,
)
from ratatoskr.vmp.snapshot import (
    HEADER_SIZE,
    declared_snapshot_size,
    length_mismatch,
    snapshot_size_limit,
)
from ratatoskr.vmp.store import VmpStore

logger = logging.getLogger("ratatoskr.vmp")

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
# Bodies above this are parsed off the event loop.
_PARSE_INLINE_BYTES = 256 * 1024
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
JSON_TYPE = "application/json"
SNAPSHOT_TYPE = "application/octet-stream"
# An upload reaches the spool file in writes of about this size, each in a worker thread.
_SPOOL_WRITE_BYTES = 1 << 20

_T = TypeVar("_T")
Handler = Callable[[Request], Awaitable[Response]]


def error_response(error: VmpError) -> JSONResponse:
    """The one rendering of a VMP error."""
    return JSONResponse(error.to_body(), status_code=error.status)


def _guarded(handler: Handler) -> Handler:
    @functools.wraps(handler)
    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except VmpError as exc:
            return error_response(exc)
        except Exception as exc:
            # The type only: an exception's text may carry request content.
            logger.error("vmp: unexpected %s on %s", type(exc).__name__, request.url.path)
            return error_response(InternalError("internal error"))

    return endpoint


async def _in_thread(func: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    return await anyio.to_thread.run_sync(functools.partial(func, *args, **kwargs))


def _rendered(answer: Callable[[], Any]) -> bytes:
    value = answer()
    try:
        return orjson.dumps(value)
    except TypeError:  # an integer beyond 64 bits in metadata: the standard library keeps it
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


async def _json_answer(answer: Callable[[], Any]) -> Response:
    """Run ``answer`` (the store call and the shaping of its result) and render its JSON
    in a worker thread: neither a slow store nor a large answer stalls the event loop."""
    content = await anyio.to_thread.run_sync(_rendered, answer)
    return Response(content, media_type="application/json")


def _require_type(request: Request, wanted: str) -> None:
    """Refuse a body whose media type is not ``wanted`` (parameters such as charset allowed)."""
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != wanted:
        raise UnsupportedMediaType(f"this route takes a body of Content-Type {wanted}")


def _declared_length(request: Request) -> int | None:
    # The server has already refused a malformed Content-Length; absent means chunked.
    declared = request.headers.get("content-length", "")
    return int(declared) if declared.isdigit() else None


async def _read_body(request: Request, limit: int) -> bytes:
    declared = _declared_length(request)
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


def _write_all(spool: IO[bytes], pieces: list[bytes]) -> None:
    try:
        spool.writelines(pieces)
    except OSError as exc:
        raise CapacityExceeded("no space to receive the snapshot") from exc


async def _spool_snapshot(request: Request, spool: IO[bytes], cap: int) -> None:
    """Copy the request body into ``spool``, refusing it as early as its bytes allow.

    The cap is counted here, whatever Content-Length said or whether there was one
    (chunked). Once the first HEADER_SIZE bytes are in, the snapshot's own header
    says how long it is: a foreign blob (400) or one announcing more than the cap
    (413) is refused there, and so is any byte beyond the announced size (400).
    """
    declared = _declared_length(request)
    limit = cap
    head = b""
    pending: list[bytes] = []
    pending_size = received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if len(head) < HEADER_SIZE:
            head += chunk[: HEADER_SIZE - len(head)]
            if len(head) == HEADER_SIZE:
                size = declared_snapshot_size(head)
                if size > cap:
                    raise _too_large(cap)
                if declared not in (None, size):
                    raise length_mismatch()
                limit = size
        if received > limit:
            raise _too_large(cap) if limit == cap else length_mismatch()
        pending.append(chunk)
        pending_size += len(chunk)
        if pending_size >= _SPOOL_WRITE_BYTES:
            await _in_thread(_write_all, spool, pending)
            pending, pending_size = [], 0
    await _in_thread(_write_all, spool, pending)
    await _in_thread(spool.flush)


def _open_spool(directory: str | None) -> IO[bytes]:
    try:
        return tempfile.TemporaryFile(mode="w+b", dir=directory)
    except OSError as exc:
        raise InternalError(f"no spool file for the upload ({type(exc).__name__})") from exc


def _too_large(cap: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"a snapshot upload is at most {cap} bytes")


async def _json_object(
    request: Request, limit: int, *, required: Collection[str], optional: Collection[str] = ()
) -> dict[str, Any]:
    _require_type(request, JSON_TYPE)
    raw = await _read_body(request, limit)
    body = (
        strict_loads(raw)
        if len(raw) <= _PARSE_INLINE_BYTES
        else await _in_thread(strict_loads, raw)
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


def build_vmp_app(
    store: VmpStore,
    *,
    api_key: str | None,
    previous_keys: Sequence[str] = (),
    allow_no_key: bool = False,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_snapshot_bytes: int | None = None,
    spool_dir: str | os.PathLike[str] | None = None,
) -> Starlette:
    """The VMP plane's Starlette app over ``store``.

    ``api_key`` is the bearer key every request must carry (``previous_keys`` are
    still accepted during a rotation). It may be None only
    with ``allow_no_key=True``, by which the caller asserts the server listens on
    loopback alone (see :func:`ratatoskr.vmp.auth.is_loopback_host`); the app then
    logs a warning that it runs without authentication. ``max_body_bytes`` caps
    JSON bodies; ``max_snapshot_bytes`` caps snapshot uploads (None: the
    :func:`ratatoskr.vmp.snapshot.snapshot_size_limit` of the store's
    ``max_records`` and ``dim``). Uploads are spooled to an unnamed owner-only
    temporary file in ``spool_dir`` (None: the database's directory, or the
    system's temporary directory for a store in memory).
    Raises ValueError for an empty key, no key without ``allow_no_key``, or a
    limit below 1.
    """
    if api_key is not None and not api_key:
        raise ValueError("api_key must not be empty")
    if max_body_bytes < 1 or (max_snapshot_bytes is not None and max_snapshot_bytes < 1):
        raise ValueError("body size limits must be at least 1 byte")
    snapshot_cap = (
        snapshot_size_limit(store.max_records, store.dim)
        if max_snapshot_bytes is None
        else max_snapshot_bytes
    )
    spool_in = os.fspath(spool_dir) if spool_dir is not None else store.directory
    if api_key is None:
        if not allow_no_key:
            raise ValueError("api_key is required unless the server listens on loopback only")
        logger.warning("vmp: no API key configured; serving without authentication (loopback only)")

    async def upsert_vector(request: Request) -> Response:
        body = await _json_object(
            request,
            max_body_bytes,
            required=("vector",),
            optional=("attach_to_document_node", "tags", "metadata"),
        )
        return await _json_answer(
            lambda: store.upsert_vector(
                body["vector"],
                attach_to_document_node=body.get("attach_to_document_node"),
                tags=body.get("tags"),
                metadata=body.get("metadata"),
            ).to_json()
        )

    async def search_vector(request: Request) -> Response:
        body = await _json_object(request, max_body_bytes, required=("query_vector", "k"))
        return await _json_answer(
            lambda: {
                "results": [
                    hit.to_json() for hit in store.search_vector(body["query_vector"], body["k"])
                ]
            }
        )

    async def meta_set(request: Request) -> Response:
        body = await _json_object(request, max_body_bytes, required=("target_id", "metadata"))
        if not isinstance(body["target_id"], str):
            raise InvalidArgument("target_id must be a string")
        await _in_thread(store.set_metadata, body["target_id"], body["metadata"])
        return JSONResponse({"success": True})

    async def meta_get(request: Request) -> Response:
        values = request.query_params.getlist("target_id")
        if len(values) != 1:
            raise InvalidArgument("exactly one target_id query parameter is required")
        target = values[0]
        return await _json_answer(
            lambda: {"target_id": target, "metadata": store.get_metadata(target)}
        )

    async def snapshot_download(request: Request) -> Response:
        blob = await _in_thread(store.snapshot)
        if len(blob) > snapshot_cap:
            # A backup this server would refuse to take back: say so while it is made.
            logger.warning(
                "vmp: a snapshot of %d bytes exceeds the upload cap of %d bytes;"
                " raise the cap to restore it here",
                len(blob),
                snapshot_cap,
            )
        return Response(blob, media_type="application/octet-stream")

    async def snapshot_upload(request: Request) -> Response:
        _require_type(request, SNAPSHOT_TYPE)
        declared = _declared_length(request)
        if declared is not None and declared > snapshot_cap:
            # Answered before a byte of the body is read: a client that sent
            # ``Expect: 100-continue`` never sends it.
            raise _too_large(snapshot_cap)
        # Unnamed (O_TMPFILE where there is one) and owner-only: nothing else can
        # open it, and it is gone when closed, whatever happens in between.
        spool = await _in_thread(_open_spool, spool_in)
        try:
            try:
                await _spool_snapshot(request, spool, snapshot_cap)
            except ClientDisconnect:
                raise InvalidArgument("the upload ended before its body did") from None
            await _in_thread(spool.seek, 0)
            await _in_thread(store.restore_from_file, spool)
        finally:
            # Shielded: a cancelled request (client gone) must still free the spool now.
            with anyio.CancelScope(shield=True):
                await _in_thread(spool.close)
        return JSONResponse({"success": True})

    async def proof_state(request: Request) -> Response:
        return await _json_answer(lambda: {"final_state_hash": store.state_hash()})

    async def health(request: Request) -> Response:
        return await _json_answer(store.health)

    routes = [
        Route("/v1/memory/upsert_vector", _guarded(upsert_vector), methods=["POST"]),
        Route("/v1/memory/upsert", _guarded(upsert_vector), methods=["POST"]),
        Route("/v1/memory/search_vector", _guarded(search_vector), methods=["POST"]),
        Route("/v1/memory/search", _guarded(search_vector), methods=["POST"]),
        Route("/v1/memory/meta/set", _guarded(meta_set), methods=["POST"]),
        Route("/v1/memory/meta/get", _guarded(meta_get), methods=["GET"]),
        Route("/v1/snapshot/download", _guarded(snapshot_download), methods=["GET"]),
        Route("/v1/snapshot/upload", _guarded(snapshot_upload), methods=["POST"]),
        Route("/v1/proof/state", _guarded(proof_state), methods=["GET"]),
        Route("/health", _guarded(health), methods=["GET"]),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(BearerAuth, api_key=api_key, previous_keys=previous_keys)],
        exception_handlers={HTTPException: _http_error},
    )


async def _http_error(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, HTTPException):
        return error_response(InternalError("internal error"))
    if exc.status_code == 404:
        return error_response(NotFound("no such route"))
    if exc.status_code == 405:
        error = InvalidArgument("method not allowed on this route")
        return JSONResponse(error.to_body(), status_code=405, headers=exc.headers)
    return error_response(InvalidArgument("bad request"))
