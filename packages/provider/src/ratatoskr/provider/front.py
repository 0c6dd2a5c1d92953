"""The provider app's front door: a request for a mounted plane goes straight to its
mount, without the outer app's error and exception middleware and router.

A call crossed Starlette twice — the provider app, then the plane app — and the outer
crossing (``ServerErrorMiddleware``, ``ExceptionMiddleware``, the router's loop) was
≈ a tenth of a small call's server CPU. :class:`ProviderApp` does what that router
did for a mount — the first route that matches, the mount's own ``matches()`` and
child scope, ``scope["app"]``, ``["router"]`` and ``["route"]`` — and hands the request to the
mount's app inside the provider's :class:`~ratatoskr.provider.observe.ObserveMiddleware`
(one log line and one count, as before). What it leaves out changes nothing for a
mount: each plane app is a Starlette app with its own error and exception middleware,
and a mount matches fully or not at all. The provider's own routes (``/healthz``,
``/readyz``, ``/metrics``), a path no mount takes, lifespan and anything not HTTP go
through Starlette as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette._utils import get_route_path
from starlette.applications import Starlette
from starlette.routing import Match, Mount
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["ProviderApp"]


async def _mounted(scope: Scope, receive: Receive, send: Send) -> None:
    """The app a mount matched (Starlette's ``Mount.handle``)."""
    await scope["endpoint"](scope, receive, send)


# Paths whose mount match is remembered (a dict lookup instead of the mounts' regexes
# and a child scope built per call); bounded, so paths a client invents cost no memory.
MATCH_CACHE_SIZE = 256
_Matched = tuple[Mount, Scope]


class ProviderApp(Starlette):
    """Starlette, with mounts served directly once :meth:`serve_mounts` was called."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._observed: ASGIApp | None = None
        self._mounts: tuple[Mount, ...] = ()
        self._before: frozenset[str] = frozenset()
        self._matched: dict[tuple[str, str], _Matched] = {}

    def serve_mounts(self, wrap: Callable[[ASGIApp], ASGIApp]) -> None:
        """Serve requests for the mounts through ``wrap(mount dispatch)`` (the
        provider's observing middleware). Only mounts that no other route precedes
        in a way that could match first are taken: the routes before a mount are
        plain paths, answered by Starlette."""
        before: set[str] = set()
        mounts: list[Mount] = []
        for route in self.routes:
            if isinstance(route, Mount):
                mounts.append(route)
            else:
                path = getattr(route, "path", None)
                if not isinstance(path, str) or mounts or "{" in path:
                    raise ValueError("serve_mounts needs the plain routes before the mounts")
                before.add(path)
        self._mounts = tuple(mounts)
        self._before = frozenset(before)
        self._matched.clear()
        self._observed = wrap(_mounted)

    def _match(self, scope: Scope) -> _Matched | None:
        """The first mount that matches ``scope`` fully and its child scope (the
        router's choice). A scope without ``path_params`` or ``app_root_path`` of its
        own (the server's, at the top) matches by its path and root path alone, so
        that answer is remembered, up to :data:`MATCH_CACHE_SIZE` paths."""
        key = (scope["path"], scope.get("root_path", ""))
        plain = "path_params" not in scope and "app_root_path" not in scope
        if plain:
            found = self._matched.get(key)
            if found is not None:
                return found
        for mount in self._mounts:
            match, child = mount.matches(scope)
            if match is Match.FULL:
                if plain and len(self._matched) < MATCH_CACHE_SIZE:
                    self._matched[key] = (mount, child)
                return mount, child
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        observed = self._observed
        if (
            observed is not None
            and scope["type"] == "http"
            and get_route_path(scope) not in self._before
        ):
            found = self._match(scope)
            if found is not None:
                mount, child = found
                scope["app"] = self
                if "router" not in scope:
                    scope["router"] = self.router
                scope["route"] = mount
                scope.update(child)
                scope["path_params"] = dict(child["path_params"])  # each call its own
                await observed(scope, receive, send)
                return
        await super().__call__(scope, receive, send)
