"""The Starlette apps: one per plane, routes ``POST /bifrost/handshake`` and
``POST /bifrost/<plane>-call``.

Request pipeline (the wire spec's "order of work"): the token's signature and
claims, its plane and whether its ``jti`` was seen are checked from the headers
(→ 401), and the body must be declared ``application/json`` (→ 400), before a
byte of the body is read, so an unauthenticated or replayed
caller never makes the server buffer a body → read the body under the size
limit (``Content-Length`` and the streamed size, → 413) → in a worker thread
(:func:`run_off_loop`, so neither a slow store nor a large answer stalls the
event loop): the body must be the one the token was minted for, and the
``jti`` is then remembered in the shared replay cache (→ 401) → parse the
envelope strictly (→ 400) → the token's verb must be the envelope's verb
(→ 401) → dispatch → render the response JSON (orjson).

Logging: one line per call on ``bifrost.consumer`` with plane, verb, call_id,
status, error code and duration — never bodies, tokens, content or scope values.

One builder serves every plane: :func:`build_plane_app` takes the plane's
:class:`~bifrost.planes.PlaneSpec`; ``build_memory_app`` / ``build_affect_app``
are it with the spec filled in (same parameters, after ``spec``).

Lifespans: pass ``lifespan=`` (an ASGI lifespan context factory) and/or
``hooks=AppHooks(on_startup=[…], on_shutdown=[…])``. Starlette does not run
the lifespan of a mounted sub-app; a combined provider enters each plane app's
``app.router.lifespan_context(app)`` itself.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import orjson
from starlette._utils import get_route_path
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from bifrost.auth.verifier import Claims, PendingToken
from bifrost.consumer.budget import BodyBudget
from bifrost.consumer.callpool import run_off_loop
from bifrost.consumer.edge import Head, bearer, declared_size, read_body, require_json, send_json
from bifrost.consumer.registration import ConsumerRegistration
from bifrost.context import DispatchContext
from bifrost.dispatch import safe_name
from bifrost.envelope import Envelope, parse_envelope
from bifrost.errors import (
    Unauthenticated,
    UnknownVerb,
    loggable_id,
    render_error,
)
from bifrost.jsoncodec import canonical_json
from bifrost.planes import AFFECT_PLANE, MEMORY_PLANE, PlaneSpec

__all__ = [
    "AppHooks",
    "CallRecord",
    "PlaneApp",
    "TokenVerifier",
    "build_affect_app",
    "build_memory_app",
    "build_plane_app",
]

_log = logging.getLogger("bifrost.consumer")

Lifespan = Callable[[Starlette], contextlib.AbstractAsyncContextManager[Any]]
_S = TypeVar("_S")
_P = ParamSpec("_P")


class TokenVerifier(Protocol):
    """What the apps need of a verifier (:class:`bifrost.auth.JwtVerifier` is one)."""

    def check_headers(self, token: str, *, plane: str) -> PendingToken: ...

    def admit(self, pending: PendingToken, body: bytes) -> Claims: ...


@dataclass(frozen=True)
class CallRecord:
    """What ``AppHooks.on_call`` receives after each call (no content)."""

    plane: str
    route: str
    verb: str | None
    call_id: str | None
    status: int
    error_code: str | None
    duration_s: float


@dataclass(frozen=True)
class AppHooks:
    """Optional callbacks. ``on_startup`` / ``on_shutdown`` callables may be sync
    or async and run in the app's lifespan; ``on_call`` runs after every call
    (errors in it are logged and swallowed)."""

    on_startup: Sequence[Callable[[], Any]] = ()
    on_shutdown: Sequence[Callable[[], Any]] = ()
    on_call: Callable[[CallRecord], None] | None = None


@dataclass
class _Plane:
    spec: PlaneSpec[Any]
    store: Any
    verifier: TokenVerifier
    registration: ConsumerRegistration
    hooks: AppHooks = field(default_factory=AppHooks)
    budget: BodyBudget | None = None
    heavy_calls: threading.Semaphore | None = None

    @property
    def name(self) -> str:
        return self.spec.name


def _render(payload: Mapping[str, Any]) -> bytes:
    """Response JSON: UTF-8, compact, NaN refused. orjson writes it (much faster
    than the standard library: docs/decisions.md); an integer beyond 64 bits, which orjson
    refuses, falls back to the standard library."""
    try:
        return orjson.dumps(payload)
    except TypeError:
        return canonical_json(payload)


class _Handled:
    """Mutable per-call facts the sync pipeline reports back for logging."""

    call_id: str | None = None
    verb: str | None = None


def _pipeline(
    plane: _Plane, body: bytes, pending: PendingToken, handshake: bool, facts: _Handled
) -> bytes:
    """Everything after the body is in, in a worker thread; returns the rendered answer."""
    claims = plane.verifier.admit(pending, body)
    env = parse_envelope(body, max_containers=plane.registration.max_json_containers)
    facts.call_id, facts.verb = env.call_id, env.verb
    if env.verb != claims.verb:
        raise Unauthenticated("token minted for another verb")
    ctx = DispatchContext(
        actor=claims.actor,
        scope=dict(claims.scope),
        call_id=env.call_id,
        plane=plane.name,
        verb=env.verb,
        consumer_id=plane.registration.consumer_id,
        token_id=claims.token_id,
    )
    if handshake:
        if env.verb != "handshake":
            raise UnknownVerb("the handshake route serves only the handshake verb")
        result = plane.spec.handshake(plane.store, env, ctx)
        return _render({"ok": True, "call_id": env.call_id, "result": result})
    gate = plane.heavy_calls if plane.heavy_calls is not None and _heavy(env, body) else None
    with gate if gate is not None else contextlib.nullcontext():
        result = plane.spec.dispatch(plane.store, env, ctx)
        return _render({"ok": True, "call_id": env.call_id, "result": result})


# A call is heavy when its body is large or it may answer with many records: such calls
# take turns through ``heavy_calls`` so that a small call of another tenant always
# finds the interpreter free often enough to keep its latency.
_HEAVY_BODY_BYTES = 256 * 1024
_HEAVY_COUNT = 100


def _heavy(env: Envelope, body: bytes) -> bool:
    if len(body) >= _HEAVY_BODY_BYTES:
        return True
    args = env.args
    for name in ("top_k", "limit"):
        value = args.get(name)
        if isinstance(value, int) and value >= _HEAVY_COUNT:
            return True
    return any(
        isinstance(args.get(name), list) and len(args[name]) >= _HEAVY_COUNT
        for name in ("ids", "keys")
    )


def _reserved(budget: BodyBudget | None, size: int) -> contextlib.AbstractAsyncContextManager[None]:
    return contextlib.nullcontext() if budget is None else budget.reserve(size)


def _endpoint(plane: _Plane, *, handshake: bool) -> ASGIApp:
    """The route's pure ASGI handler (no Starlette request or response objects: their
    generality was a fifth of a small call's server CPU, docs/decisions.md)."""
    route = "handshake" if handshake else f"{plane.name}-call"

    async def endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        start = time.perf_counter()
        facts = _Handled()
        code: str | None = None
        try:
            head = Head(scope)
            pending = plane.verifier.check_headers(bearer(head), plane=plane.name)
            require_json(head)
            limit = plane.registration.max_body_bytes
            async with _reserved(plane.budget, declared_size(head, limit)):
                body = await read_body(receive, limit)
                content = await run_off_loop(_pipeline, plane, body, pending, handshake, facts)
                del body
            status = 200
        except Exception as exc:  # the single error rendering point
            status, payload = render_error(exc, plane=plane.name, call_id=facts.call_id)
            code = payload["error"]["code"]
            try:
                content = _render(payload)
            except ValueError:  # pragma: no cover - error bodies are plain data
                status, payload = render_error(RuntimeError(), plane=None, call_id=None)
                content = _render(payload)
        duration = time.perf_counter() - start
        verb = safe_name(facts.verb) if facts.verb is not None else None
        _log.info(
            "bifrost call plane=%s route=%s verb=%s call_id=%s status=%d code=%s duration_ms=%.1f",
            plane.name,
            route,
            verb,
            loggable_id(facts.call_id),
            status,
            code,
            duration * 1000,
        )
        if plane.hooks.on_call is not None:
            try:
                plane.hooks.on_call(
                    CallRecord(plane.name, route, verb, facts.call_id, status, code, duration)
                )
            except Exception as exc:
                _log.warning("on_call hook failed type=%s", type(exc).__name__)
        await send_json(send, status, content)

    return endpoint


async def _run_hooks(hooks: Sequence[Callable[[], Any]]) -> None:
    for hook in hooks:
        out = hook()
        if inspect.isawaitable(out):
            await out


def _lifespan(hooks: AppHooks, inner: Lifespan | None) -> Lifespan:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[Any]:
        await _run_hooks(hooks.on_startup)
        try:
            if inner is None:
                yield None
            else:
                async with inner(app) as state:
                    yield state
        finally:
            await _run_hooks(hooks.on_shutdown)

    return lifespan


class PlaneApp(Starlette):
    """A plane's Starlette app whose call routes skip Starlette's routing: a ``POST``
    to one of ``hot_routes`` (path inside the app → pure ASGI handler) goes straight
    to its handler; everything else (other methods → 405, other paths → 404, the
    lifespan) is Starlette's, as before. A provider mounting the app can serve
    ``hot_routes`` itself the same way."""

    def __init__(self, hot_routes: Mapping[str, ASGIApp], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hot_routes: Mapping[str, ASGIApp] = dict(hot_routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            handler = self.hot_routes.get(get_route_path(scope))
            if handler is not None:
                scope["app"] = self
                await handler(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def build_plane_app(
    spec: PlaneSpec[_S],
    store: _S,
    verifier: TokenVerifier,
    registration: ConsumerRegistration,
    maintenance_store: Any = None,
    hooks: AppHooks | None = None,
    *,
    lifespan: Lifespan | None = None,
    body_budget: BodyBudget | None = None,
    heavy_calls: threading.Semaphore | None = None,
) -> Starlette:
    """The app of the plane ``spec`` describes, serving ``store``.

    ``store`` is required (INV-008): ``None`` or an object lacking the methods of
    ``spec.protocol`` → ``TypeError``; a registration that does not declare the
    plane → ``ValueError``; a verifier without ``check_headers``/``admit`` →
    ``TypeError``. ``maintenance_store`` is kept on ``app.state`` only: no
    maintenance verb is served by this version (they answer
    ``<plane>.unsupported_verb``). ``body_budget`` bounds the body bytes in flight
    (share one across the apps of a process; None: no bound beyond
    ``registration.max_body_bytes`` per call); ``heavy_calls`` is the semaphore
    heavy calls (large bodies, ``top_k``/``limit`` or id lists of 100 and more)
    take turns through, shared likewise."""
    if store is None:
        raise TypeError(f"build_{spec.name}_app requires a store (INV-008)")
    if not isinstance(store, spec.protocol):
        raise TypeError(f"store does not implement {spec.protocol.__name__}")
    if spec.name not in registration.planes:
        raise ValueError(f"registration does not declare the {spec.name} plane")
    if not all(callable(getattr(verifier, m, None)) for m in ("check_headers", "admit")):
        raise TypeError("verifier must have check_headers() and admit() (e.g. JwtVerifier)")
    plane = _Plane(
        spec, store, verifier, registration, hooks or AppHooks(), body_budget, heavy_calls
    )
    hot = {
        "/bifrost/handshake": _endpoint(plane, handshake=True),
        spec.route: _endpoint(plane, handshake=False),
    }
    app = PlaneApp(
        hot,
        routes=[Route(path, handler, methods=["POST"]) for path, handler in hot.items()],
        lifespan=_lifespan(plane.hooks, lifespan),
    )
    app.state.bifrost_plane = spec.name
    app.state.bifrost_store = store
    app.state.bifrost_maintenance_store = maintenance_store
    return app


def _with_spec(
    build: Callable[Concatenate[PlaneSpec[_S], _P], Starlette], spec: PlaneSpec[_S]
) -> Callable[_P, Starlette]:
    """``build`` with its plane filled in: the same parameters after ``spec`` (a
    store of ``spec.protocol`` first), under the name ``build_<plane>_app``."""

    def builder(*args: _P.args, **kwargs: _P.kwargs) -> Starlette:
        return build(spec, *args, **kwargs)

    signature = inspect.signature(build)
    store, *rest = list(signature.parameters.values())[1:]
    builder.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[store.replace(annotation=spec.protocol.__name__), *rest]
    )
    builder.__name__ = builder.__qualname__ = f"build_{spec.name}_app"
    builder.__doc__ = f"The {spec.name} plane app: :func:`{build.__name__}` for this plane."
    return builder


# The seed contract's entry point, and its affect twin.
build_memory_app = _with_spec(build_plane_app, MEMORY_PLANE)
build_affect_app = _with_spec(build_plane_app, AFFECT_PLANE)
