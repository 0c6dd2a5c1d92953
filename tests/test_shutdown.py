"""SIGTERM (and SIGHUP, a closed terminal) lets an in-flight call finish: a request
whose body is still arriving when the signal lands is answered, and its write is in
the file afterwards — with one process and with workers."""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from bifrost.client import build_envelope, mint_token
from ratatoskr.memory import open_memory_store

from .conftest import KEY, start_server


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("workers", [1, 2])
def test_a_stop_signal_waits_for_the_call_in_flight(
    server_env: dict[str, str], tmp_path: Path, sig: signal.Signals, workers: int
) -> None:
    server = start_server(["serve", "--workers", str(workers)], server_env, tmp_path)
    records = [{"id": f"late-{i}", "embedding": [1.0] * 8, "scope": {}} for i in range(50)]
    body = build_envelope("upsert_many", {"records": records}, idempotency_key="late")
    token = mint_token(KEY.encode(), plane="memory", verb="upsert_many", body=body, actor="a")
    url = urlsplit(server.base_url)
    head = (
        "POST /memory/bifrost/memory-call HTTP/1.1\r\n"
        f"Host: {url.netloc}\r\n"
        f"Authorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall(head + body[: len(body) // 2])
        time.sleep(0.3)  # the server has the request open
        server.proc.send_signal(sig)
        # Shutdown has begun (uvicorn says so in every process that serves; with
        # workers, once the supervisor has passed the signal on); the call is in flight.
        deadline = time.monotonic() + 30
        while "Shutting down" not in server.log():
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.01)
        sock.sendall(body[len(body) // 2 :])
        response = b""
        while chunk := sock.recv(65536):
            response += chunk
            if b"\r\n\r\n" in response and response.endswith(b"}"):
                break
    status_line, _, rest = response.partition(b"\r\n")
    assert status_line.split()[1] == b"200", response[:500]
    payload = json.loads(rest.split(b"\r\n\r\n", 1)[1])
    assert payload["result"] == {"upserted": 50, "replayed": False}
    assert server.proc.wait(30) in (0, -signal.SIGTERM)
    assert "Application shutdown complete" in "".join(server.output)
    store = open_memory_store(server_env["RATATOSKR_MEMORY_DB"], embedding_dim=8)
    assert store.count() == 50
    store.close()
