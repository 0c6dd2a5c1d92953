"""App construction, lifespan hooks, and the event loop staying free while a
store call is slow."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from bifrost.client import mint_token
from bifrost.consumer import (
    AppHooks,
    BodyBudget,
    CallRecord,
    ConsumerRegistration,
    build_affect_app,
    build_memory_app,
)
from bifrost.consumer.testing import InMemoryAffectStore, InMemoryMemoryStore
from bifrost.consumer.testing.support import DIM, KEY, SpyMemoryStore, Wire, envelope_bytes
from bifrost.reference_server import JwtVerifier

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_store_required() -> None:
    v, r = JwtVerifier(KEY), ConsumerRegistration()
    with pytest.raises(TypeError):
        build_memory_app(None, v, r)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        build_affect_app(None, v, r)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        build_memory_app(object(), v, r)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        build_affect_app(InMemoryMemoryStore(DIM), v, r)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="memory"):
        build_memory_app(InMemoryMemoryStore(DIM), v, ConsumerRegistration(planes=("affect",)))


def test_registration_rules() -> None:
    with pytest.raises(ValueError, match="consumer_id"):
        ConsumerRegistration(consumer_id="")
    with pytest.raises(ValueError, match="max_body_bytes"):
        ConsumerRegistration(max_body_bytes=0)
    with pytest.raises(ValueError, match="planes"):
        ConsumerRegistration(planes=("vmp",))
    assert ConsumerRegistration().max_body_bytes == 8 * 1024 * 1024


def test_routes() -> None:
    app = build_memory_app(InMemoryMemoryStore(DIM), JwtVerifier(KEY), ConsumerRegistration())
    paths = {getattr(r, "path", None): getattr(r, "methods", None) for r in app.routes}
    assert set(paths) == {"/bifrost/handshake", "/bifrost/memory-call"}
    assert all("POST" in (m or set()) for m in paths.values())
    app2 = build_affect_app(InMemoryAffectStore(), JwtVerifier(KEY), ConsumerRegistration())
    assert {getattr(r, "path", None) for r in app2.routes} == {
        "/bifrost/handshake",
        "/bifrost/affect-call",
    }


def test_lifespan_and_hooks() -> None:
    events: list[str] = []
    calls: list[CallRecord] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        events.append("lifespan-enter")
        yield
        events.append("lifespan-exit")

    async def async_start() -> None:
        events.append("async-start")

    hooks = AppHooks(
        on_startup=[lambda: events.append("start"), async_start],
        on_shutdown=[lambda: events.append("stop")],
        on_call=calls.append,
    )
    app = build_memory_app(
        InMemoryMemoryStore(DIM),
        JwtVerifier(KEY),
        ConsumerRegistration(),
        hooks=hooks,
        lifespan=lifespan,
    )
    with TestClient(app) as client:
        assert events == ["start", "async-start", "lifespan-enter"]
        Wire(client, "memory").ok("health")
        assert Wire(client, "memory").call("frobnicate").status_code == 400
    assert events[-2:] == ["lifespan-exit", "stop"]
    assert [(c.verb, c.status, c.error_code) for c in calls] == [
        ("'health'", 200, None),
        ("'frobnicate'", 400, "bifrost.unknown_verb"),
    ]
    assert all(c.duration_s >= 0 and c.call_id for c in calls)


def test_on_call_hook_failure_is_swallowed() -> None:
    def bad(_: CallRecord) -> None:
        raise RuntimeError("hook broke")

    app = build_memory_app(
        InMemoryMemoryStore(DIM),
        JwtVerifier(KEY),
        ConsumerRegistration(),
        hooks=AppHooks(on_call=bad),
    )
    with TestClient(app) as client:
        Wire(client, "memory").ok("health")


class SlowSearchStore(SpyMemoryStore):
    def search(self, vector: list[float], **kw: Any) -> list[dict[str, Any]]:
        time.sleep(1.0)
        return super().search(vector, **kw)


def test_slow_store_does_not_stall_the_loop() -> None:
    store = SlowSearchStore(DIM)
    app = build_memory_app(store, JwtVerifier(KEY), ConsumerRegistration())
    finished: dict[str, float] = {}

    def request(verb: str, args: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
        body = envelope_bytes(verb, args)
        token = mint_token(KEY, plane="memory", verb=verb, body=body, actor="a")
        return body, {"authorization": f"Bearer {token}", "content-type": "application/json"}

    async def main() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            start = time.perf_counter()

            async def go(name: str, verb: str, args: dict[str, Any]) -> None:
                body, headers = request(verb, args)
                resp = await client.post("/bifrost/memory-call", content=body, headers=headers)
                assert resp.status_code == 200, resp.text
                finished[name] = time.perf_counter() - start

            async with anyio.create_task_group() as tg:
                tg.start_soon(go, "search", "search", {"vector": [1.0] * DIM, "top_k": 1})
                await anyio.sleep(0.05)
                tg.start_soon(go, "health", "health", {})

    anyio.run(main)
    assert finished["search"] >= 1.0
    assert finished["health"] < 0.5
    assert finished["health"] < finished["search"]


class TimedSearchStore(SpyMemoryStore):
    def __init__(self) -> None:
        super().__init__(DIM)
        self.spans: dict[int, tuple[float, float]] = {}

    def search(self, vector: list[float], **kw: Any) -> list[dict[str, Any]]:
        start = time.perf_counter()
        time.sleep(0.3)
        self.spans[kw["top_k"]] = (start, time.perf_counter())
        return super().search(vector, **kw)


def test_heavy_calls_take_turns_small_ones_do_not_wait() -> None:
    """top_k >= 100 makes a call heavy: two of them never overlap under a one-slot gate,
    while a small one runs beside them."""
    store = TimedSearchStore()
    app = build_memory_app(
        store,
        JwtVerifier(KEY),
        ConsumerRegistration(),
        heavy_calls=threading.BoundedSemaphore(1),
    )

    async def main() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:

            async def go(top_k: int) -> None:
                body = envelope_bytes("search", {"vector": [1.0] * DIM, "top_k": top_k})
                token = mint_token(KEY, plane="memory", verb="search", body=body, actor="a")
                headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
                resp = await client.post("/bifrost/memory-call", content=body, headers=headers)
                assert resp.status_code == 200, resp.text

            async with anyio.create_task_group() as tg:
                for top_k in (100, 500, 5):
                    tg.start_soon(go, top_k)

    anyio.run(main)
    (a0, a1), (b0, b1) = store.spans[100], store.spans[500]
    assert a1 <= b0 or b1 <= a0  # the heavy ones took turns
    small_start = store.spans[5][0]
    assert small_start < max(a1, b1) - 0.1  # the small one did not queue behind both


def test_state_exposes_store() -> None:
    store = InMemoryMemoryStore(DIM)
    marker = object()
    app = build_memory_app(
        store, JwtVerifier(KEY), ConsumerRegistration(), maintenance_store=marker
    )
    assert app.state.bifrost_store is store
    assert app.state.bifrost_plane == "memory"
    assert app.state.bifrost_maintenance_store is marker


def test_body_budget_bounds_bytes_in_flight_and_queues_the_rest() -> None:
    async def main() -> list[str]:
        budget = BodyBudget(1_000_000)
        order: list[str] = []

        async def call(name: str, size: int, hold: float) -> None:
            async with budget.reserve(size):
                order.append(f"{name}+")
                assert budget.in_use <= budget.limit
                await asyncio.sleep(hold)
            order.append(f"{name}-")

        await asyncio.gather(
            call("a", 600_000, 0.05),
            call("b", 600_000, 0.0),
            call("c", 10**9, 0.0),
            call("small", 300, 0.0),
        )
        assert budget.in_use == 0
        return order

    order = asyncio.run(main())
    assert order.index("b+") > order.index("a-")  # b waited until a gave its bytes back
    assert "c+" in order  # a body larger than the budget still runs, alone
    assert order.index("small+") < order.index("a-")  # a small body never waits
