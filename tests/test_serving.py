"""The socket the server listens on, and what small calls cost over it.

Regression for the 44 ms small call: the listening socket was created with
protocol 0, so asyncio never set TCP_NODELAY on accepted connections and
Nagle's algorithm plus the client's delayed ACK added ~40 ms to every answer.
"""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import statistics
import threading
import time
from typing import Any

import httpx
import pytest
import uvicorn

from bifrost.client import BifrostClient
from bifrost.consumer.testing.helpers import envelope_bytes, signed_headers
from ratatoskr.provider.connections import (
    _FD_HEADROOM,
    GuardedHttpToolsProtocol,
    ProviderConfig,
)
from ratatoskr.provider.preflight import OpenPlanes, ServedPlane
from ratatoskr.provider.registry import entry
from ratatoskr.provider.serving import _hold_files, bind_socket, connection_cap
from ratatoskr.provider.settings import ConfigError, Settings
from ratatoskr.provider.testing import ServerProcess

from .conftest import KEY


def test_accepted_connections_have_tcp_nodelay() -> None:
    """asyncio sets TCP_NODELAY only on connections accepted from a socket whose
    ``proto`` is IPPROTO_TCP; uvicorn serves from exactly this socket."""
    sock = bind_socket("127.0.0.1", 0)
    assert sock.proto == socket.IPPROTO_TCP
    seen: list[int] = []

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            accepted = transport.get_extra_info("socket")
            seen.append(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        port = sock.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())
    assert seen
    assert seen[0] != 0


def _p50_ms(call: object, n: int = 30) -> float:
    assert callable(call)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times[5:]) * 1000


@pytest.mark.slow
def test_sequential_keep_alive_calls_are_far_under_the_nagle_delay(server: ServerProcess) -> None:
    """With Nagle on, every one of these took ≥ 40 ms; the margin here is wide (20 ms)
    so a noisy machine cannot fail it, while the old bug always did."""
    memory = BifrostClient(
        f"{server.base_url}/memory", KEY.encode(), actor="a", scope={"tenant": "t"}, plane="memory"
    )
    memory.upsert_many(
        [{"id": "c", "embedding": [1.0] * 8, "scope": {"tenant": "t"}, "content": "x"}],
        idempotency_key="k",
    )
    with httpx.Client(timeout=10) as client:
        # Raw keep-alive POSTs with pre-minted tokens: the server's answer, not minting.
        url = f"{server.base_url}/memory/bifrost/memory-call"
        calls = []
        for i in range(30):
            body = envelope_bytes("health", call_id=f"h{i}")
            headers = signed_headers(
                KEY.encode(), body, plane="memory", verb="health", actor="a", scope={}
            )
            calls.append((body, headers))
        it = iter(calls)

        def health() -> None:
            body, headers = next(it)
            resp = client.post(url, content=body, headers=headers)
            assert resp.status_code == 200

        assert _p50_ms(health) < 20
        assert _p50_ms(lambda: client.get(f"{server.base_url}/healthz")) < 20
        vmp = f"{server.base_url}/vmp/health"
        assert (
            _p50_ms(
                lambda: client.get(vmp, headers={"Authorization": "Bearer e2e-vmp-key-0123456789"})
            )
            < 20
        )
    # bifrost's own client (keep-alive, a token minted per call) too.
    assert _p50_ms(memory.health) < 20
    memory.close()


def test_the_connection_cap_leaves_the_planes_their_files(caplog: pytest.LogCaptureFixture) -> None:
    """The cap keeps room below the open-file limit for every plane's reader threads
    (2 × 40 descriptors each, plus 64): at a generous limit it is the setting; at 256
    the floor of 16, with a warning naming the limit (the protocol then also closes
    waiting connections when a new socket's descriptor nears the limit)."""
    settings = Settings(max_connections=1024)
    assert connection_cap(settings, 1 << 20, 3) == 1024
    assert not caplog.records
    assert connection_cap(settings, 1024, 3) == 1024 - 64 - 240
    assert connection_cap(settings, 256, 3) == 16
    assert "open-file limit (256)" in caplog.text


def test_connections_make_room_when_descriptors_near_the_limit() -> None:
    """Below the connection cap, a new socket numbered within 32 of the open-file limit
    still closes the connection that has waited longest (the planes' reader threads
    may hold more files than the cap foresaw), so the client behind it is served.

    The limit is set from this process's descriptor table, which other threads of the
    test process (pools, flushers of earlier tests under pytest-xdist) may change while
    it runs: the scenario gets three tries, and fails if none holds."""
    failures: list[BaseException] = []
    for _ in range(3):
        try:
            _make_room_scenario()
            return
        except (AssertionError, httpx.HTTPError, TimeoutError, OSError) as exc:
            failures.append(exc)
    raise AssertionError(f"no try held: {failures!r}")


def _make_room_scenario() -> None:
    async def app(scope: dict[str, object], receive: object, send: Any) -> None:
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    config = ProviderConfig(
        app,
        request_timeout_s=30,
        max_connections=100_000,
        max_head_bytes=65536,
        max_headers=100,
        open_file_limit=1 << 20,  # set below, once the server's loop holds its own files
        http=GuardedHttpToolsProtocol,
        loop="uvloop",
        lifespan="off",
        log_level="warning",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    idle: list[socket.socket] = []
    try:
        for _ in range(100):
            if server.started:
                break
            time.sleep(0.05)
        # Waiting connections first, with no crowding mark yet: each takes two
        # descriptors (both ends are in this process), so half the holes in the table
        # fill them and 8 more go past its highest descriptor. Once the server holds
        # them all, the mark is set just below the next descriptor: the client measured
        # is the first crowded connection, and the oldest waiting one must make room.
        fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
        count = (max(fds) + 1 - len(fds) + 1) // 2 + 8
        _raise_soft_file_limit(max(fds) + 1 + 2 * count + 64)
        idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(count)]
        for _ in range(200):
            if len(server.server_state.connections) >= count:
                break
            time.sleep(0.01)
        highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
        config.open_file_limit = highest + 1 + _FD_HEADROOM - 4
        answer = httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
        assert answer.status_code == 200
        idle[0].settimeout(2)
        assert idle[0].recv(1) == b""  # the oldest made room
        idle[-1].settimeout(0.2)
        with pytest.raises(TimeoutError):
            idle[-1].recv(1)  # the newest is still held
    finally:
        for s in idle:
            s.close()
        server.should_exit = True
        thread.join(10)
        sock.close()


def _raise_soft_file_limit(needed: int) -> None:
    """Raise this process's soft open-file limit to ``needed`` (within the hard one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        top = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))


def test_a_file_the_parent_cannot_hold_is_refused_naming_its_setting(tmp_path: Any) -> None:
    # What the parent holds for its workers (serving._hold_files): a file gone between
    # the preflight and the hold is a one-line refusal naming the setting, not the path.
    settings = Settings(memory_db=str(tmp_path / "gone.db"), affect_db=":memory:")
    opened = OpenPlanes()
    opened.served["affect"] = ServedPlane(entry("affect"), store=None)
    opened.served["memory"] = ServedPlane(entry("memory"), store=None)
    with pytest.raises(ConfigError) as caught:
        _hold_files(settings, opened)
    assert str(caught.value).startswith("RATATOSKR_MEMORY_DB: cannot hold the file open:")
    assert str(tmp_path) not in str(caught.value)
