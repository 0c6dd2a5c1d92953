"""A token is good once for the whole deployment, over real sockets.

A captured request replayed (a) to a second process serving the same files (a
standalone plane beside the combined provider), (b) to the same provider after a
restart, (c) to the other worker of a ``--workers 2`` server is answered 401
and executes nothing — for a delete, an affect write, and an upsert whose first
run failed its revision condition (it must not write on replay either).
"""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psutil  # type: ignore[import-untyped]  # no stubs in the dev group
import pytest

from bifrost.client import BifrostClient
from bifrost.consumer.testing.helpers import envelope_bytes, signed_headers
from bifrost.errors import RevisionMismatch
from ratatoskr.memory.testing import chunk, one_hot
from ratatoskr.provider.testing import ServerProcess

from .conftest import KEY, loopback_http, loopback_transport, start_server

pytestmark = pytest.mark.slow
GRANT = {"tenant": "acme"}


def record(chunk_id: str, i: int, content: str) -> dict[str, Any]:
    return chunk(chunk_id, one_hot(i, rest=0.1), GRANT, content=content)


class Captured:
    """One request exactly as it went over the wire: body bytes and token."""

    def __init__(self, plane: str, verb: str, args: dict[str, Any], key: str | None = None):
        self.plane = plane
        self.body = envelope_bytes(
            verb, args, call_id=f"cap-{uuid.uuid4().hex[:8]}", idempotency_key=key
        )
        self.headers = signed_headers(
            KEY.encode(), self.body, plane=plane, verb=verb, actor="agent", scope=GRANT
        )

    def send(self, base_url: str, client: httpx.Client | None = None) -> httpx.Response:
        url = f"{base_url}/bifrost/{self.plane}-call"
        if client is not None:
            return client.post(url, content=self.body, headers=self.headers)
        with loopback_http(timeout=30) as fresh:
            return fresh.post(url, content=self.body, headers=self.headers)


def refused_as_replay(resp: httpx.Response) -> None:
    assert resp.status_code == 401, resp.text
    assert resp.json()["error"] == {
        "code": "bifrost.unauthenticated",
        "message": "token replayed",
        "details": {},
    }


def client(base: str, plane: str) -> BifrostClient:
    return BifrostClient(
        base,
        KEY.encode(),
        actor="agent",
        scope=GRANT,
        plane=plane,
        transport=loopback_transport(),
    )


def replay_everything(first: str, second: str) -> None:
    """Use captured requests at ``first`` (the ``/memory`` / ``/affect`` bases of one
    process), change the data the way a legitimate client would, then replay each at
    ``second`` (another process, or the same one restarted): all refused, nothing run."""
    m1, a1 = client(f"{first}/memory", "memory"), client(f"{first}/affect", "affect")
    m2, a2 = client(f"{second}/memory", "memory"), client(f"{second}/affect", "affect")
    m1.upsert_many([record("c1", 1, "v1")], idempotency_key="seed")

    delete = Captured("memory", "delete_many", {"ids": ["c1"]})
    assert delete.send(f"{first}/memory").json()["result"] == {"deleted": 1}
    conditional = Captured(
        "memory",
        "upsert_many",
        {"records": [record("c2", 2, "stale")], "expected_revisions": {"c2": 1}},
        key="cond",
    )
    assert conditional.send(f"{first}/memory").json()["error"]["code"] == (
        "memory.revision_mismatch"
    )
    put = Captured(
        "affect", "put_many", {"records": [{"key": "k", "scope": GRANT, "mood": 0}]}, "p"
    )
    assert put.send(f"{first}/affect").status_code == 200
    # The legitimate client moves on: re-creates c1, creates c2 (now at revision 1,
    # so the failed condition would hold on replay), writes new affect state.
    m1.upsert_many([record("c1", 1, "again")], idempotency_key="recreate")
    m1.upsert_many([record("c2", 2, "fresh")], idempotency_key="create-c2")
    a1.put_many([{"key": "k", "scope": GRANT, "mood": 1}], idempotency_key="p2")

    for captured in (delete, conditional, put):
        refused_as_replay(captured.send(f"{second}/{captured.plane}"))
    got_c1, got_c2 = m2.get("c1"), m2.get("c2")
    assert got_c1 is not None
    assert got_c1["content"] == "again"
    assert got_c2 is not None
    assert (got_c2["content"], got_c2["revision"]) == ("fresh", 1)
    state = a2.get("k")
    assert state is not None
    assert (state["mood"], state["revision"]) == (1, 2)
    assert [i["revision"] for i in a2.history("k")["items"]] == [2, 1]


def test_replay_to_a_second_process_on_the_same_files(
    server: ServerProcess, server_env: dict[str, str], tmp_path: Path
) -> None:
    second = start_server(["serve"], server_env, tmp_path)
    try:
        replay_everything(server.base_url, second.base_url)
        # And the other way round, on the standalone memory provider.
        standalone = start_server(["serve", "--plane", "memory"], server_env, tmp_path)
        try:
            used = Captured("memory", "health", {})
            assert used.send(standalone.base_url).status_code == 200
            refused_as_replay(used.send(f"{server.base_url}/memory"))
        finally:
            standalone.stop()
    finally:
        second.stop()


def test_replay_after_a_restart_and_after_sigkill(
    server: ServerProcess, server_env: dict[str, str], tmp_path: Path
) -> None:
    used = Captured("memory", "health", {})
    assert used.send(f"{server.base_url}/memory").status_code == 200
    # SIGKILL: the accepted jti must already be on disk (in the OS) when the call returned.
    assert server.stop(signal.SIGKILL) == -signal.SIGKILL
    restarted = start_server(["serve"], server_env, tmp_path)
    try:
        refused_as_replay(used.send(f"{restarted.base_url}/memory"))
        replay_everything(restarted.base_url, restarted.base_url)
    finally:
        restarted.stop()
    again = start_server(["serve"], server_env, tmp_path)
    try:
        refused_as_replay(used.send(f"{again.base_url}/memory"))
    finally:
        again.stop()


def test_replay_across_two_workers(server_env: dict[str, str], tmp_path: Path) -> None:
    srv = start_server(["serve", "--workers", "2"], server_env, tmp_path)
    try:
        parent = psutil.Process(srv.proc.pid)
        deadline = time.monotonic() + 30
        workers: list[psutil.Process] = []
        while time.monotonic() < deadline and len(workers) < 2:
            workers = [p for p in parent.children(recursive=True) if p.net_connections("tcp")]
            time.sleep(0.1)
        assert len({w.pid for w in workers}) == 2, "expected two serving workers"
        pair = _connections_on_two_workers(srv.base_url, workers)
        (pid_a, client_a), (pid_b, client_b) = pair
        assert pid_a != pid_b
        try:
            used = Captured("memory", "delete_many", {"ids": ["nothing-here"]})
            assert used.send(f"{srv.base_url}/memory", client_a).status_code == 200
            refused_as_replay(used.send(f"{srv.base_url}/memory", client_b))
            # Both workers serve the same files: a write through one is read through the other.
            put = Captured("memory", "upsert_many", {"records": [record("w", 3, "x")]}, "w1")
            assert put.send(f"{srv.base_url}/memory", client_b).status_code == 200
            get = Captured("memory", "get", {"chunk_id": "w"})
            assert get.send(f"{srv.base_url}/memory", client_a).json()["result"]["content"] == "x"
            refused_as_replay(put.send(f"{srv.base_url}/memory", client_a))
        finally:
            client_a.close()
            client_b.close()
        # SIGTERM stops both workers gracefully and the parent exits 0.
        assert srv.stop() == 0
        assert not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)
    finally:
        if srv.proc.poll() is None:
            srv.stop(signal.SIGKILL)


def _connections_on_two_workers(
    base: str, workers: list[psutil.Process]
) -> list[tuple[int, httpx.Client]]:
    """Open keep-alive clients until two of them are served by different workers."""
    by_worker: dict[int, httpx.Client] = {}
    spare: list[httpx.Client] = []
    for _ in range(60):
        client = loopback_http(timeout=30)
        pid = _serving_pid(client, base, workers)
        if pid not in by_worker:
            by_worker[pid] = client
        else:
            spare.append(client)
        if len(by_worker) == 2:
            break
    for client in spare:
        client.close()
    assert len(by_worker) == 2, "the kernel never handed a connection to the second worker"
    return list(by_worker.items())


def _serving_pid(client: httpx.Client, base: str, workers: list[psutil.Process]) -> int:
    before = {c.laddr.port for c in _own_connections()}
    assert client.get(f"{base}/healthz").status_code == 200
    new = [c for c in _own_connections() if c.laddr.port not in before]
    assert len(new) == 1, "expected exactly one new connection"
    port = new[0].laddr.port
    for worker in workers:
        for conn in worker.net_connections("tcp"):
            if conn.raddr and conn.raddr.port == port:
                return int(worker.pid)
    raise AssertionError("no worker holds the connection")


def _own_connections() -> list[Any]:
    return [
        c
        for c in psutil.Process().net_connections("tcp")
        if c.raddr and c.status == psutil.CONN_ESTABLISHED
    ]


def test_failed_conditional_upsert_never_writes_on_replay_in_one_process(
    server: ServerProcess,
) -> None:
    m = client(f"{server.base_url}/memory", "memory")
    with pytest.raises(RevisionMismatch):
        m.upsert_many([record("z", 1, "cond")], idempotency_key="z0", expected_revisions={"z": 1})
    captured = Captured(
        "memory",
        "upsert_many",
        {"records": [record("z", 1, "stale")], "expected_revisions": {"z": 1}},
        key="z1",
    )
    assert captured.send(f"{server.base_url}/memory").status_code == 409
    m.upsert_many([record("z", 1, "fresh")], idempotency_key="z2")
    refused_as_replay(captured.send(f"{server.base_url}/memory"))
    got = m.get("z")
    assert got is not None
    assert (got["content"], got["revision"]) == ("fresh", 1)
