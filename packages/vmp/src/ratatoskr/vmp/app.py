"""The VMP v0 HTTP surface: exactly the routes, bodies and status codes of the spec.

``build_vmp_app(store, api_key=…)`` returns a Starlette app; it has no lifespan
and no module-level state. The handlers (:mod:`ratatoskr.vmp.handlers`) raise;
every failure is rendered here, once, as ``{"error": message, "code": CODE}`` —
unknown routes (404 NOT_FOUND) and wrong methods (405 with code INVALID_ARGUMENT)
included — except authentication failures, which are 401 with an empty body
(:mod:`ratatoskr.vmp.auth`).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Awaitable, Callable, Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ratatoskr.vmp.auth import BearerAuth
from ratatoskr.vmp.errors import InternalError, InvalidArgument, NotFound, VmpError
from ratatoskr.vmp.handlers import VmpHandlers
from ratatoskr.vmp.snapshot import snapshot_size_limit
from ratatoskr.vmp.store import VmpStore

logger = logging.getLogger("ratatoskr.vmp")

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024

Handler = Callable[[Request], Awaitable[Response]]


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
    handlers = VmpHandlers(store, max_body_bytes, snapshot_cap, spool_in)
    return Starlette(
        routes=vmp_routes(handlers),
        middleware=[Middleware(BearerAuth, api_key=api_key, previous_keys=previous_keys)],
        exception_handlers={HTTPException: _http_error},
    )


def vmp_routes(handlers: VmpHandlers) -> list[Route]:
    """The routes of VMP v0 (and their aliases), each rendering its own errors."""
    return [
        Route("/v1/memory/upsert_vector", _guarded(handlers.upsert_vector), methods=["POST"]),
        Route("/v1/memory/upsert", _guarded(handlers.upsert_vector), methods=["POST"]),
        Route("/v1/memory/search_vector", _guarded(handlers.search_vector), methods=["POST"]),
        Route("/v1/memory/search", _guarded(handlers.search_vector), methods=["POST"]),
        Route("/v1/memory/meta/set", _guarded(handlers.meta_set), methods=["POST"]),
        Route("/v1/memory/meta/get", _guarded(handlers.meta_get), methods=["GET"]),
        Route("/v1/snapshot/download", _guarded(handlers.snapshot_download), methods=["GET"]),
        Route("/v1/snapshot/upload", _guarded(handlers.snapshot_upload), methods=["POST"]),
        Route("/v1/proof/state", _guarded(handlers.proof_state), methods=["GET"]),
        Route("/health", _guarded(handlers.health), methods=["GET"]),
    ]


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


async def _http_error(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, HTTPException):
        return error_response(InternalError("internal error"))
    if exc.status_code == 404:
        return error_response(NotFound("no such route"))
    if exc.status_code == 405:
        error = InvalidArgument("method not allowed on this route")
        return JSONResponse(error.to_body(), status_code=405, headers=exc.headers)
    return error_response(InvalidArgument("bad request"))
