"""Loopback is not "any web page": a page in a browser on this machine must not reach
a plane. DNS rebinding sends the attacker's own name in `Host`; a cross-site form or
`text/plain` POST needs no CORS preflight. Both once reached every plane (an upsert
landed on VMP; restoring an empty snapshot wiped it)."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator

import httpx
import pytest

from bifrost.client import build_envelope, mint_token
from ratatoskr.provider.testing import ServerProcess

from .conftest import KEY, server_settings, start_server

pytestmark = pytest.mark.slow
GRANT = {"tenant": "t"}
VMP_AUTH = {"Authorization": "Bearer e2e-vmp-key-0123456789"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One provider for the module: no test here may write anything, and each asserts the
    planes are still empty, so a write that got through fails its test and every later one."""
    home = tmp_path_factory.mktemp("browsers")
    s = start_server(["serve"], server_settings(home), home)
    yield s
    s.stop(signal.SIGTERM, timeout=10)
    s.close()


def _memory_upsert(server: ServerProcess, headers: dict[str, str]) -> httpx.Response:
    record = {"id": "x", "embedding": [1.0] * 8, "scope": GRANT}
    body = build_envelope("upsert_many", {"records": [record]}, idempotency_key="k")
    token = mint_token(
        KEY.encode(), plane="memory", verb="upsert_many", body=body, actor="a", scope=GRANT
    )
    return httpx.post(
        f"{server.base_url}/memory/bifrost/memory-call",
        content=body,
        headers={"Authorization": f"Bearer {token}", **headers},
    )


def _memory_count(server: ServerProcess) -> int:
    body = build_envelope("get", {"chunk_id": "x"})
    token = mint_token(KEY.encode(), plane="memory", verb="get", body=body, actor="a", scope=GRANT)
    resp = httpx.post(
        f"{server.base_url}/memory/bifrost/memory-call",
        content=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    assert resp.status_code == 200, resp.text
    return 0 if resp.json()["result"] is None else 1


def _vmp_records(server: ServerProcess) -> int:
    resp = httpx.get(f"{server.base_url}/vmp/health", headers=VMP_AUTH)
    assert resp.status_code == 200
    return int(resp.json()["records"])


def test_a_foreign_host_reaches_no_plane(server: ServerProcess) -> None:
    evil = {"Host": "attacker.example", "Content-Type": "application/json"}
    resp = _memory_upsert(server, evil)
    assert resp.status_code == 400
    assert resp.text == "Invalid host header"
    for path in ("/vmp/health", "/vmp/v1/snapshot/download", "/affect/bifrost/affect-call"):
        got = httpx.request(
            "GET" if "vmp" in path else "POST",
            f"{server.base_url}{path}",
            headers={**VMP_AUTH, "Host": "attacker.example:8765"},
        )
        assert got.status_code == 400, path
    vmp_write = httpx.post(
        f"{server.base_url}/vmp/v1/memory/upsert_vector",
        content=json.dumps({"vector": [1.0] * 16}),
        headers={**VMP_AUTH, "Host": "attacker.example", "Content-Type": "application/json"},
    )
    assert vmp_write.status_code == 400
    assert _memory_count(server) == 0
    assert _vmp_records(server) == 0
    # The loopback names, with or without a port, and liveness with any name.
    for host in ("localhost", "127.0.0.1", f"127.0.0.1:{server.base_url.rsplit(':', 1)[1]}"):
        ok = httpx.get(f"{server.base_url}/vmp/health", headers={**VMP_AUTH, "Host": host})
        assert ok.status_code == 200, host
    assert (
        httpx.get(f"{server.base_url}/healthz", headers={"Host": "any.example"}).status_code == 200
    )


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
def test_a_cross_site_simple_request_writes_nothing(
    server: ServerProcess, content_type: str
) -> None:
    headers = {"Content-Type": content_type, "Origin": "https://attacker.example"}
    resp = _memory_upsert(server, headers)
    assert resp.status_code == 400
    assert resp.json()["error"]["message"] == "body must be sent as application/json"
    assert _memory_count(server) == 0
