"""ProviderApp serves its mounts directly and answers exactly as Starlette's router did."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Mount, Route
from starlette.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send

from ratatoskr.provider import front
from ratatoskr.provider.front import ProviderApp


async def _echo(request: Request) -> JSONResponse:
    return JSONResponse(
        {
            "path": request.url.path,
            "root_path": request.scope.get("root_path"),
            "route_path": request.scope["path"][len(request.scope.get("root_path", "")) :],
            "method": request.method,
            "outer_app": type(request.scope["router"]).__name__,
        }
    )


async def _boom(request: Request) -> PlainTextResponse:
    raise RuntimeError("boom")


def _plane() -> Starlette:
    return Starlette(
        routes=[
            Route("/bifrost/call", _echo, methods=["POST"]),
            Route("/v1/get", _echo, methods=["GET"]),
            Route("/boom", _boom, methods=["GET"]),
        ]
    )


async def _healthz(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


class _Count:
    """The provider's observing middleware stand-in: counts what passes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.seen: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.seen.append(scope["path"])
        await self.app(scope, receive, send)


def _routes(single: bool) -> list[Route | Mount]:
    guarded = [
        TrustedHostMiddleware(_plane(), allowed_hosts=["testserver"], www_redirect=False)
        for _ in range(2)
    ]
    routes: list[Route | Mount] = [Route("/healthz", _healthz, methods=["GET"])]
    if single:
        routes.append(Mount("/", app=guarded[0]))
    else:
        routes += [Mount("/memory", app=guarded[0]), Mount("/vmp", app=guarded[1])]
    return routes


def _apps(single: bool) -> tuple[Starlette, ProviderApp, list[_Count]]:
    counts: list[_Count] = []

    def wrap(app: ASGIApp) -> ASGIApp:
        counts.append(_Count(app))
        return counts[-1]

    plain = Starlette(routes=_routes(single))
    plain.add_middleware(_Count)
    fast = ProviderApp(routes=_routes(single))
    fast.add_middleware(_Count)
    fast.serve_mounts(wrap)
    return plain, fast, counts


REQUESTS_MULTI = [
    ("POST", "/memory/bifrost/call", "testserver"),
    ("GET", "/memory/bifrost/call", "testserver"),
    ("POST", "/memory/bifrost/call", "evil.example"),
    ("GET", "/vmp/v1/get?x=1", "testserver"),
    ("POST", "/vmp/v1/get", "testserver"),
    ("GET", "/vmp/nowhere", "testserver"),
    ("GET", "/memory", "testserver"),
    ("GET", "/memory/", "testserver"),
    ("GET", "/memoryx/bifrost/call", "testserver"),
    ("GET", "/healthz", "evil.example"),
    ("POST", "/healthz", "testserver"),
    ("GET", "/nowhere", "testserver"),
    ("GET", "/vmp/boom", "testserver"),
]
REQUESTS_SINGLE = [
    ("POST", "/bifrost/call", "testserver"),
    ("GET", "/bifrost/call", "testserver"),
    ("POST", "/bifrost/call", "evil.example"),
    ("GET", "/v1/get", "testserver"),
    ("GET", "/healthz", "testserver"),
    ("POST", "/healthz", "testserver"),
    ("GET", "/nowhere", "testserver"),
    ("GET", "/boom", "testserver"),
]


@pytest.mark.parametrize("single", [False, True])
def test_same_answers_as_starlette_s_router(single: bool) -> None:
    plain, fast, counts = _apps(single)
    requests = REQUESTS_SINGLE if single else REQUESTS_MULTI
    answers: list[list[tuple[int, str, str | None]]] = []
    for app in (plain, fast):
        with TestClient(app, raise_server_exceptions=False) as client:
            out = []
            for method, path, host in requests:
                r = client.request(method, path, headers={"host": host}, follow_redirects=False)
                out.append((r.status_code, r.text, r.headers.get("location")))
            answers.append(out)
    assert answers[0] == answers[1]
    # the mounts' requests went through the observing wrapper, the others through the
    # app's own middleware stack (one count each, never two)
    direct = counts[0].seen
    assert direct, "no request took the direct path"
    assert not any(p.startswith("/healthz") for p in direct)
    # a path no mount takes is Starlette's (with one plane at "/", the mount takes all)
    assert ("/nowhere" in direct) is single


def test_plain_routes_must_come_before_the_mounts() -> None:
    app = ProviderApp(routes=[Mount("/a", app=_plane()), Route("/healthz", _healthz)])
    with pytest.raises(ValueError, match="plain routes"):
        app.serve_mounts(lambda inner: inner)
    templated = ProviderApp(routes=[Route("/x/{y}", _healthz), Mount("/a", app=_plane())])
    with pytest.raises(ValueError, match="plain routes"):
        templated.serve_mounts(lambda inner: inner)


def test_without_serve_mounts_it_is_starlette() -> None:
    app = ProviderApp(routes=_routes(False))
    with TestClient(app) as client:
        assert client.post("/memory/bifrost/call").json()["root_path"] == "/memory"


def test_a_remembered_match_answers_alike_and_the_memory_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(front, "MATCH_CACHE_SIZE", 3)
    plain, fast, _counts = _apps(False)
    paths = [f"/memory/bifrost/call{i}" for i in range(5)] + ["/memory/bifrost/call"] * 3
    answers: list[list[tuple[int, str]]] = []
    for app in (plain, fast):
        with TestClient(app, raise_server_exceptions=False) as client:
            out = []
            for path in paths + ["/vmp/v1/get"] * 2:
                r = client.request("POST", path, headers={"host": "testserver"})
                out.append((r.status_code, r.text))
            answers.append(out)
    assert answers[0] == answers[1]
    assert len(fast._matched) == 3  # the first three paths, never more


def test_each_call_gets_its_own_path_params() -> None:
    seen: list[dict[str, object]] = []

    async def plane(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(dict(scope["path_params"]))  # as the call found it
        scope["path_params"]["mine"] = True
        await PlainTextResponse("ok")(scope, receive, send)

    app = ProviderApp(routes=[Mount("/p", app=plane)])
    app.serve_mounts(lambda inner: inner)
    with TestClient(app) as client:
        assert client.get("/p/x").text == "ok" and client.get("/p/x").text == "ok"
    assert seen == [{}, {}]  # the first call's change did not reach the second
