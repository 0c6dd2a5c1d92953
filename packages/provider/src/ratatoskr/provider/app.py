"""The provider's Starlette app: every plane mounted under its prefix, or one plane
at the root, plus ``GET /healthz`` (liveness) and ``GET /readyz`` (readiness, see
``readiness.py``).

The app owns its stores: ``build_provider_app`` opens them (after the preflight
checks, so bad settings fail before anything is served) and the app's lifespan
closes them at shutdown, after uvicorn has let in-flight calls finish. Starlette
does not run the lifespans of mounted apps, so this lifespan enters each plane
app's own lifespan itself.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio.to_thread
from starlette.applications import Starlette
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp

from bifrost.consumer import AppHooks, BodyBudget
from ratatoskr.provider.front import ProviderApp
from ratatoskr.provider.metrics import Metrics, metrics_endpoint, plane_files
from ratatoskr.provider.observe import ObserveMiddleware, call_hook, known_routes
from ratatoskr.provider.preflight import OpenPlanes, open_planes
from ratatoskr.provider.readiness import READY, PlaneProbe, plane_probes, probe_all
from ratatoskr.provider.registry import PLANES, AppParts
from ratatoskr.provider.settings import Plane, Settings


def build_plane_apps(settings: Settings, opened: OpenPlanes) -> dict[Plane, Starlette]:
    """One Starlette app per open plane, each built by its table entry from ``settings``."""
    # One budget for the bodies in flight across every plane of this process.
    budget = BodyBudget(settings.max_inflight_body_bytes)
    heavy = threading.BoundedSemaphore(settings.max_heavy_calls)
    hooks = AppHooks(on_call=call_hook)
    return {
        name: plane.entry.build_app(
            plane.store, AppParts(settings, plane.replay, hooks, budget, heavy)
        )
        for name, plane in opened.served.items()
    }


async def healthz(request: Request) -> JSONResponse:
    """Liveness: no auth, no data."""
    return JSONResponse({"status": "ok"})


def readyz_endpoint(probes: list[PlaneProbe]) -> Callable[[Request], Awaitable[JSONResponse]]:
    """Readiness: 200 when every served plane can use its files, else 503 naming each
    plane with what failed. No auth; no paths, counts or content."""

    async def readyz(request: Request) -> JSONResponse:
        answers = await anyio.to_thread.run_sync(probe_all, probes)
        if all(answer == READY for answer in answers.values()):
            return JSONResponse({"status": "ready", "planes": answers})
        failed = sorted(plane for plane, answer in answers.items() if answer != READY)
        return JSONResponse(
            {"status": "unready", "planes": answers, "failed": failed}, status_code=503
        )

    return readyz


def _routes(
    settings: Settings,
    planes: tuple[Plane, ...],
    apps: dict[Plane, Starlette],
    readyz: Callable[[Request], Awaitable[JSONResponse]],
    metrics: Metrics,
) -> list[BaseRoute]:
    """The probes' routes, then each plane mounted under ``/<plane>`` (at the root when
    it is the only one)."""
    # Every plane answers only to the names this deployment serves (DNS rebinding:
    # a hostile page's own name resolving to 127.0.0.1); /healthz, /readyz and /metrics
    # answer any name (a probe sends the pod's address) and hold no data.
    hosts = settings.host_names()

    def guarded(app: Starlette) -> ASGIApp:
        return TrustedHostMiddleware(app, allowed_hosts=hosts, www_redirect=False)

    routes: list[BaseRoute] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_endpoint(metrics, settings), methods=["GET"]),
    ]
    if len(planes) == 1:
        routes.append(Mount("/", app=guarded(apps[planes[0]])))
    else:
        routes += [Mount(f"/{name}", app=guarded(apps[name])) for name in planes]
    return routes


def _lifespan(
    apps: dict[Plane, Starlette], stores: OpenPlanes
) -> Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]]:
    """Enters each plane app's lifespan (Starlette does not for mounted apps); closes
    the stores at shutdown."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            async with contextlib.AsyncExitStack() as stack:
                for sub in apps.values():
                    await stack.enter_async_context(sub.router.lifespan_context(sub))
                yield
        finally:
            stores.close()

    return lifespan


def build_provider_app(
    settings: Settings,
    planes: tuple[Plane, ...] = PLANES,
    *,
    opened: OpenPlanes | None = None,
    metrics_dir: str | None = None,
) -> Starlette:
    """The provider app for ``planes``: mounted under ``/<plane>`` when several, at
    the root when one, plus ``/healthz``, ``/readyz`` and ``/metrics``. Opens the stores
    unless ``opened`` is given (then the app still closes them at shutdown).
    ``metrics_dir`` is the multi-process metrics directory of a worker (None: this
    process's metrics only). Raises ConfigError for bad settings.
    """
    stores = opened if opened is not None else open_planes(settings, planes)
    try:
        apps = build_plane_apps(settings, stores)
        probes = plane_probes(settings, planes, stores)
        files, counts = plane_files(settings, planes, stores)
        metrics = Metrics(files, counts, multiprocess_dir=metrics_dir)
    except BaseException:
        stores.close()
        raise
    routes = _routes(settings, planes, apps, readyz_endpoint(probes), metrics)
    app = ProviderApp(routes=routes, lifespan=_lifespan(apps, stores))
    app.state.planes = stores
    app.state.metrics = metrics
    # One log line and one count per request (observe.py), outermost.
    observe = functools.partial(
        ObserveMiddleware,
        planes=planes,
        verbs={name: plane.entry.verbs for name, plane in stores.served.items()},
        routes={name: known_routes(sub) for name, sub in apps.items()},
        metrics=metrics,
    )
    app.add_middleware(observe.func, **observe.keywords)
    app.serve_mounts(observe)  # the planes' requests skip the outer routing (front.py)
    return app
