"""The socket the server listens on, and what small calls cost over it.

Regression for the 44 ms small call: the listening socket was created with
protocol 0, so asyncio never set TCP_NODELAY on accepted connections and
Nagle's algorithm plus the client's delayed ACK added ~40 ms to every answer.
"""

from __future__ import annotations

import asyncio
import socket
import statistics
import time

import httpx
import pytest

from bifrost.client import BifrostClient
from bifrost.consumer.testing.helpers import envelope_bytes, signed_headers
from ratatoskr.provider.serving import bind_socket

from .conftest import KEY, Server


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
def test_sequential_keep_alive_calls_are_far_under_the_nagle_delay(server: Server) -> None:
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
