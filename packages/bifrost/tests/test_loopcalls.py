"""Calls answered on the event loop: which may be, and that a slow call in flight or a
kind that turned costly sends every call back to the pool."""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import httpx
import pytest

from bifrost.client import mint_token
from bifrost.consumer import ConsumerRegistration, build_memory_app
from bifrost.consumer.loopcalls import (
    CHEAP_CPU_S,
    LOOP_BODY_BYTES,
    SLOW_LOOP_S,
    LoopCalls,
    call_kind,
)
from bifrost.consumer.testing.support import DIM, KEY, SpyMemoryStore, envelope_bytes
from bifrost.reference_server import JwtVerifier

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

READS = frozenset({"health", "get", "search"})
TENANT = {"tenant": "t1"}


class ThreadStore(SpyMemoryStore):
    """Records the thread each search ran on; a search of tenant t2 can be held
    (``hold``), every search made slow (``delay_s``)."""

    def __init__(self) -> None:
        super().__init__(DIM)
        self.threads: list[str] = []
        self.hold = threading.Event()
        self.hold.set()
        self.delay_s = 0.0

    def search(self, vector: list[float], **kw: Any) -> list[dict[str, Any]]:
        self.threads.append(threading.current_thread().name)
        if kw.get("scope_all") == {"tenant": "t2"}:
            self.hold.wait(10)
        if self.delay_s:
            time.sleep(self.delay_s)
        return super().search(vector, **kw)


def _post(verb: str, args: dict[str, Any], scope: dict[str, str] | None = None) -> dict[str, Any]:
    body = envelope_bytes(verb, args)
    token = mint_token(KEY, plane="memory", verb=verb, body=body, actor="a", scope=scope)
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    return {"content": body, "headers": headers}


def _search(top_k: int = 3) -> dict[str, Any]:
    return _post("search", {"vector": [1.0] * DIM, "top_k": top_k, "scope_all": TENANT}, TENANT)


async def _call(client: httpx.AsyncClient, request: dict[str, Any]) -> httpx.Response:
    return await client.post("/bifrost/memory-call", **request)


def _run(app: Any, body: Any) -> None:
    async def main() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            await body(client)

    anyio.run(main)


def _app(store: ThreadStore, loop_verbs: frozenset[str] = READS) -> Any:
    return build_memory_app(store, JwtVerifier(KEY), ConsumerRegistration(), loop_verbs=loop_verbs)


def test_a_cheap_kind_runs_on_the_loop_after_one_pool_run() -> None:
    store = ThreadStore()
    loop_thread: list[str] = []

    async def body(client: httpx.AsyncClient) -> None:
        loop_thread.append(threading.current_thread().name)
        for _ in range(3):
            assert (await _call(client, _search())).status_code == 200

    _run(_app(store), body)
    first, *rest = store.threads
    assert first.startswith("bifrost-call")  # unknown kind: the pool
    assert rest == [loop_thread[0]] * 2  # then on the loop


def test_without_loop_verbs_every_call_goes_to_the_pool() -> None:
    store = ThreadStore()

    async def body(client: httpx.AsyncClient) -> None:
        for _ in range(3):
            assert (await _call(client, _search())).status_code == 200

    _run(_app(store, frozenset()), body)
    assert all(name.startswith("bifrost-call") for name in store.threads)


def test_a_slow_call_in_flight_sends_small_calls_to_the_pool_and_does_not_stall_them() -> None:
    """A held search of another tenant is in the pool: the small calls (of a kind known
    cheap) are answered meanwhile, from the pool, not behind it and not on the loop."""
    store = ThreadStore()
    loop_thread: list[str] = []
    done: dict[str, float] = {}

    async def body(client: httpx.AsyncClient) -> None:
        loop_thread.append(threading.current_thread().name)
        assert (await _call(client, _search())).status_code == 200  # the kind is cheap now
        store.hold.clear()
        slow = _post("search", {"vector": [1.0] * DIM, "top_k": 3, "scope_all": {"tenant": "t2"}})

        async def held() -> None:
            assert (await _call(client, slow)).status_code == 200
            done["slow"] = time.perf_counter()

        async with anyio.create_task_group() as tg:
            tg.start_soon(held)
            await anyio.sleep(0.1)
            for _ in range(3):
                assert (await _call(client, _search())).status_code == 200
            done["small"] = time.perf_counter()
            store.hold.set()

    _run(_app(store), body)
    assert done["small"] < done["slow"]
    after_first = store.threads[1:]
    assert len(after_first) == 4
    assert loop_thread[0] not in after_first  # the held one and the three small ones: pool


def test_a_kind_slow_on_the_loop_goes_back_to_the_pool() -> None:
    store = ThreadStore()
    loop_thread: list[str] = []

    async def body(client: httpx.AsyncClient) -> None:
        loop_thread.append(threading.current_thread().name)
        assert (await _call(client, _search())).status_code == 200  # pool, cheap
        store.delay_s = SLOW_LOOP_S * 2
        assert (await _call(client, _search())).status_code == 200  # loop, waited
        assert (await _call(client, _search())).status_code == 200  # pool, waits again
        assert (await _call(client, _search())).status_code == 200  # pool: still not quick
        store.delay_s = 0.0
        assert (await _call(client, _search())).status_code == 200  # pool, quick
        assert (await _call(client, _search())).status_code == 200  # loop again

    _run(_app(store), body)
    loop = loop_thread[0]
    assert [name == loop for name in store.threads] == [False, True, False, False, False, True]


def test_on_the_loop_a_token_for_another_body_or_a_replay_is_refused() -> None:
    store = ThreadStore()

    async def body(client: httpx.AsyncClient) -> None:
        assert (await _call(client, _search())).status_code == 200  # the kind is cheap now
        good = _search()
        other = _search()
        forged = {"content": other["content"], "headers": good["headers"]}
        resp = await _call(client, forged)
        assert resp.status_code == 401
        assert resp.json()["error"]["message"] == "token not minted for this body"
        assert (await _call(client, good)).status_code == 200  # not used up by the refusal
        resp = await _call(client, good)
        assert resp.status_code == 401
        assert resp.json()["error"]["message"] == "token replayed"

    _run(_app(store), body)
    assert len(store.threads) == 2  # the refused calls never reached the store


def test_heavy_and_malformed_calls_never_run_on_the_loop() -> None:
    store = ThreadStore()
    loop_thread: list[str] = []

    async def body(client: httpx.AsyncClient) -> None:
        loop_thread.append(threading.current_thread().name)
        for _ in range(2):
            assert (await _call(client, _search(top_k=100))).status_code == 200
        assert (await _call(client, _search())).status_code == 200  # the kind is cheap now
        bad = _search()
        bad["content"] = bad["content"][:-1]  # not JSON: 400, after the token's checks
        bad["headers"]["authorization"] = "Bearer " + mint_token(
            KEY, plane="memory", verb="search", body=bad["content"], actor="a", scope=TENANT
        )
        assert (await _call(client, bad)).status_code == 400

    _run(_app(store), body)
    assert len(store.threads) == 3
    assert loop_thread[0] not in store.threads


def test_unknown_loop_verb_is_refused() -> None:
    with pytest.raises(ValueError, match="loop_verbs"):
        _app(ThreadStore(), frozenset({"search", "fly"}))


# -- LoopCalls itself ----------------------------------------------------------------------


def test_kind_ignores_lists_and_strings_but_not_scopes_or_limits() -> None:
    a = call_kind("search", TENANT, {"vector": [1.0], "top_k": 3, "scope_all": TENANT})
    b = call_kind("search", TENANT, {"vector": [2.0], "top_k": 3, "scope_all": TENANT})
    assert a == b
    assert a != call_kind("search", TENANT, {"top_k": 4, "scope_all": TENANT})
    assert a != call_kind("search", TENANT, {"top_k": 3, "scope_all": {"tenant": "t2"}})
    assert a != call_kind("search", {}, {"top_k": 3, "scope_all": TENANT})
    assert call_kind("get", {}, {"chunk_id": "x"}) == call_kind("get", {}, {"chunk_id": "y"})
    assert call_kind("get", {}, {"limit": 2**70}) is None


def test_loop_calls_rules() -> None:
    calls = LoopCalls({"get"}, max_kinds=2)
    assert calls.candidate("get", LOOP_BODY_BYTES)
    assert not calls.candidate("get", LOOP_BODY_BYTES + 1)
    assert not calls.candidate("search", 10)
    kinds = [call_kind("get", {"t": str(i)}, {}) for i in range(3)]
    k0, k1, k2 = (k for k in kinds if k is not None)
    assert not calls.on_loop(k0)  # unknown
    calls.ran_in_pool(k0, CHEAP_CPU_S * 2, 0.0)  # costly
    assert not calls.on_loop(k0)
    calls.ran_in_pool(k0, 0.0, 1.0)  # cheap (the time in the pool is no guide)
    assert calls.on_loop(k0)
    assert not calls.hand_off(k0)  # a cheap kind in the pool does not count
    assert calls.on_loop(k0)
    calls.back(False)
    risky = calls.hand_off(None)  # a write, say
    assert risky
    assert not calls.on_loop(k0)
    calls.back(risky)
    assert calls.hand_off(k1)  # an unknown kind counts too
    assert not calls.on_loop(k0)
    calls.back(True)
    calls.ran_in_pool(k1, 0.0, 0.0)
    assert calls.on_loop(k0)  # k0 used last, so k1 is the oldest
    calls.ran_in_pool(k2, 0.0, 0.0)
    assert len(calls) == 2
    assert not calls.on_loop(k1)  # forgotten
    calls.ran_on_loop(k0, 0.0, SLOW_LOOP_S / 2)
    assert calls.on_loop(k0)
    calls.ran_on_loop(k0, CHEAP_CPU_S, 0.0)  # costly on the loop
    assert not calls.on_loop(k0)
    calls.ran_in_pool(k0, 0.0, SLOW_LOOP_S * 5)  # cheap: a long wall alone is the load
    assert calls.on_loop(k0)
    calls.ran_on_loop(k0, 0.0, SLOW_LOOP_S * 2)  # waited on the loop
    assert not calls.on_loop(k0)
    calls.ran_in_pool(k0, 0.0, SLOW_LOOP_S * 2)  # and waits in the pool too
    assert not calls.on_loop(k0)
    calls.ran_in_pool(k0, 0.0, 0.0)  # quick again
    assert calls.on_loop(k0)
    calls.ran_in_pool(k0, CHEAP_CPU_S * 2, 0.0)
    assert not calls.on_loop(k0)
