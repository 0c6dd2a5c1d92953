"""/metrics and the request logs of a real ``ratatoskr serve`` (issue 16).

Scraped with prometheus-client's own parser; with ``--workers 2`` the counts of
both workers are summed. JSON logs are parsed line by line.
"""

from __future__ import annotations

import json
import logging
import logging.config
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from bifrost.client import BifrostClient, build_envelope, mint_token
from ratatoskr.provider.app import build_provider_app
from ratatoskr.provider.observe import CALL_FIELDS, log_config
from ratatoskr.provider.settings import Settings
from ratatoskr.provider.testing import ServerProcess

from .conftest import KEY, loopback_http, start_server

VMP_KEY = "e2e-vmp-key-0123456789"
DIM = 8


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        "RATATOSKR_MEMORY_DB": str(tmp_path / "memory.db"),
        "RATATOSKR_AFFECT_DB": str(tmp_path / "affect.db"),
        "RATATOSKR_VMP_DB": str(tmp_path / "vmp.db"),
        "RATATOSKR_MEMORY_EMBEDDING_DIM": str(DIM),
        "RATATOSKR_VMP_DIM": "4",
        "RATATOSKR_HEIMDALL_KEY": KEY,
        "RATATOSKR_VMP_API_KEY": VMP_KEY,
        "RATATOSKR_PORT": "0",
    }
    env.update(extra)
    return env


def _call(
    client: httpx.Client, base: str, verb: str, args: dict[str, Any], **kw: Any
) -> tuple[httpx.Response, bytes, str]:
    body = build_envelope(verb, args, **kw)
    token = mint_token(
        KEY.encode(), plane="memory", verb=verb, body=body, actor="a", scope={"tenant": "t"}
    )
    r = _post(client, base, body, token)
    return r, body, token


def _post(client: httpx.Client, base: str, body: bytes, token: str) -> httpx.Response:
    return client.post(
        f"{base}/memory/bifrost/memory-call",
        content=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )


def traffic(base: str) -> None:
    """2 upserts (one an idempotent replay), 1 search, 1 replayed token, 1 VMP upsert."""
    record = {"id": "r1", "embedding": [1.0] + [0.0] * (DIM - 1), "scope": {"tenant": "t"}}
    with loopback_http(timeout=30) as client:
        for _ in range(2):
            r, body, token = _call(
                client, base, "upsert_many", {"records": [record]}, idempotency_key="k1"
            )
            assert r.status_code == 200, r.text
        assert r.json()["result"]["replayed"] is True
        assert _post(client, base, body, token).status_code == 401  # the token again
        r, _, _ = _call(client, base, "search", {"vector": [1.0] + [0.0] * (DIM - 1), "top_k": 1})
        assert r.status_code == 200, r.text
        r = client.post(
            f"{base}/vmp/v1/memory/upsert",
            json={"vector": [0.1, 0.2, 0.3, 0.4]},
            headers={"Authorization": f"Bearer {VMP_KEY}"},
        )
        assert r.status_code == 200, r.text


def scrape(base: str, **headers: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with loopback_http(timeout=30) as client:
        r = client.get(f"{base}/metrics", headers=headers)
    assert r.status_code == 200, r.text
    out = {}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def total(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **want: str
) -> float:
    return sum(
        v
        for (n, labels), v in samples.items()
        if n == name and all(dict(labels).get(k) == w for k, w in want.items())
    )


def _stop(server: ServerProcess) -> None:
    if server.proc.poll() is None:
        server.stop()


@pytest.mark.slow
def test_metrics_count_calls_replays_and_sizes(tmp_path: Path) -> None:
    server = start_server(["serve"], _env(tmp_path), tmp_path)
    try:
        traffic(server.base_url)
        m = scrape(server.base_url)
    finally:
        _stop(server)
    ok = total(m, "ratatoskr_requests_total", plane="memory", verb="upsert_many", code="ok")
    assert ok == 2
    assert total(m, "ratatoskr_requests_total", plane="memory", status="401") == 1
    assert total(m, "ratatoskr_token_replays_total", plane="memory") == 1
    assert total(m, "ratatoskr_idempotent_replays_total", plane="memory", verb="upsert_many") == 1
    assert total(m, "ratatoskr_request_duration_seconds_count", plane="memory", verb="search") == 1
    assert total(m, "ratatoskr_requests_total", plane="vmp", verb="/v1/memory/upsert") == 1
    assert total(m, "ratatoskr_database_file_bytes", plane="memory") > 0
    assert total(m, "ratatoskr_index_rows", plane="memory") == 1
    verbs = {dict(labels).get("verb") for (_, labels), _v in m.items()} - {None}
    assert verbs <= {"upsert_many", "search", "/v1/memory/upsert", "other"}, verbs


@pytest.mark.slow
def test_metrics_sum_over_workers(tmp_path: Path) -> None:
    # The server's own temporary directory: other tests' servers (pytest-xdist) make
    # metrics directories in the shared one at the same time.
    temp = tmp_path / "tmp"
    temp.mkdir()
    before = set(temp.glob("ratatoskr-metrics-*"))
    server = start_server(["serve", "--workers", "2"], _env(tmp_path, TMPDIR=str(temp)), tmp_path)
    calls = 16
    try:
        deadline = time.monotonic() + 15
        while sum("startup complete" in line for line in server.output) < 2:
            assert time.monotonic() < deadline, server.output
            time.sleep(0.05)
        for _ in range(calls):  # a new connection each: the kernel spreads them
            with loopback_http(timeout=30) as client:
                args = {"vector": [1.0] * DIM, "top_k": 1}
                assert _call(client, server.base_url, "search", args)[0].status_code == 200
        # each scrape is answered by either worker, and each sums both workers' files
        scrapes = [scrape(server.base_url) for _ in range(4)]
        (made,) = set(temp.glob("ratatoskr-metrics-*")) - before
        writers = {f.stem.rsplit("_", 1)[-1] for f in made.glob("counter_*.db")}
    finally:
        _stop(server)
    for m in scrapes:
        assert total(m, "ratatoskr_requests_total", plane="memory", verb="search") == calls
        assert total(m, "ratatoskr_request_duration_seconds_count", plane="memory") == calls
    assert 1 <= len(writers) <= 2
    # the supervisor removed its metrics directory at exit
    assert not made.exists()


@pytest.mark.slow
def test_metrics_token(tmp_path: Path) -> None:
    token = "metrics-token-0123456789"
    server = start_server(["serve"], _env(tmp_path, RATATOSKR_METRICS_TOKEN=token), tmp_path)
    try:
        assert httpx.get(f"{server.base_url}/metrics").status_code == 401
        bad = {"Authorization": "Bearer wrong-token-0123456789"}
        assert httpx.get(f"{server.base_url}/metrics", headers=bad).status_code == 401
        assert scrape(server.base_url, Authorization=f"Bearer {token}")
    finally:
        _stop(server)
    assert token not in "".join(server.output)


@pytest.mark.slow
def test_json_logs_one_line_per_request(tmp_path: Path) -> None:
    server = start_server(["serve"], _env(tmp_path, RATATOSKR_LOG_FORMAT="json"), tmp_path)
    try:
        traffic(server.base_url)
        time.sleep(0.2)
    finally:
        _stop(server)
    lines = [line for line in server.output if line.startswith("{")]
    records = [json.loads(line) for line in lines]
    assert all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    # uvicorn's own lines share the format
    assert any(r["logger"].startswith("uvicorn") for r in records)
    calls = [r for r in records if "duration_ms" in r]
    memory = [r for r in calls if r["plane"] == "memory"]
    # a refused token is answered before the body (and its verb) is read
    assert [r["verb"] for r in memory] == ["upsert_many", "upsert_many", "other", "search"]
    assert [r["status"] for r in memory] == [200, 200, 401, 200]
    refused = memory[2]
    assert refused["reason"] == "token replayed" and "reason=token replayed" in refused["message"]
    assert all(r["call_id"] for r in memory if r is not refused)
    vmp = [r for r in calls if r["plane"] == "vmp"]
    assert len(vmp) == 1 and vmp[0]["verb"] == "/v1/memory/upsert"
    assert all(isinstance(r["duration_ms"], float) for r in calls)
    # nothing but JSON on the stream once the server has started
    other = [line for line in server.output if not line.startswith("{") and line.strip()]
    assert all(line.startswith("ratatoskr:") for line in other), other


@pytest.mark.slow
def test_access_lines_only_at_debug_whatever_the_workers() -> None:
    """uvicorn's ``access_log=False`` does not reach spawned workers (each applies the
    logging dict itself), so the dict keeps ``uvicorn.access`` quiet below debug."""
    access = logging.getLogger("uvicorn.access")
    try:
        for level, fmt in (("info", "json"), ("info", "text"), ("warning", "json")):
            logging.config.dictConfig(log_config(level, fmt))
            assert not access.isEnabledFor(logging.INFO), (level, fmt)
        logging.config.dictConfig(log_config("debug", "json"))
        assert access.isEnabledFor(logging.INFO)
    finally:
        access.setLevel(logging.NOTSET)


def test_one_duration_per_call_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The message's ``duration_ms=`` and the ``duration_ms`` field of one call line are
    the same figure (computed once, by the middleware)."""
    settings = Settings(
        memory_db=str(tmp_path / "memory.db"),
        affect_db=str(tmp_path / "affect.db"),
        vmp_db=str(tmp_path / "vmp.db"),
        memory_embedding_dim=DIM,
        heimdall_key=KEY,
        allowed_hosts="testserver",
    )
    vector = [1.0] + [0.0] * (DIM - 1)
    record: dict[str, Any] = {"id": "r1", "embedding": vector, "scope": {}}
    with caplog.at_level(logging.INFO), TestClient(build_provider_app(settings)) as http:
        client = BifrostClient(
            "http://testserver/memory", KEY.encode(), actor="a", plane="memory", http_client=http
        )
        for i in range(20):
            client.upsert_many([dict(record, pad="x" * 20000 * i)])
            client.search(vector, top_k=1)
    lines = [r for r in caplog.records if isinstance(getattr(r, CALL_FIELDS, None), dict)]
    assert len(lines) == 40
    for line in lines:
        fields = getattr(line, CALL_FIELDS)
        assert f"duration_ms={fields['duration_ms']:.1f}" in line.getMessage()
