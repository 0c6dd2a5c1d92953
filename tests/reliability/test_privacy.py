"""Secrets and privacy: a broad traffic mix over every plane — successes and every
error path we can reach over HTTP — with sentinel strings planted in content,
distillates, embeddings (a recognisable float), scope values, ids, actors, VMP
metadata and tags, the tokens and the VMP key. Then every log record at DEBUG
(root logger and uvicorn's own loggers, for a provider served in this process) and
every byte a provider subprocess at ``RATATOSKR_LOG_LEVEL=debug`` wrote, and every
response body, are searched for them.

Decisions (docs/reliability.md): ids may appear in an error's ``details`` where the
contract puts them (``revision_mismatch`` names the id or key) and nowhere else in an
error; no sentinel may appear in any log line; a token or the VMP key in no response
at all; and one tenant's sentinels never in another tenant's responses. Call ids are
client-chosen correlation ids and are logged on purpose.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from bifrost.client import build_envelope, mint_token
from ratatoskr.provider.app import build_provider_app
from ratatoskr.provider.settings import Settings

from ..conftest import KEY
from .support import MEMORY_DIM, VMP_KEY, provider_env, report, running

CONTENT = "SENTINEL-CONTENT-7f3a"
DISTILLATE = "SENTINEL-DISTILLATE-51c9"
SCOPE = "SENTINEL-SCOPE-e2b4"
ID = "SENTINEL-ID-0d6e"
KEY_ID = "SENTINEL-KEY-8a1f"
ACTOR = "SENTINEL-ACTOR-c4d2"
META = "SENTINEL-META-93be"
TAG = "SENTINEL-TAG-2f70"
EMB = 0.918273645546372
EMB_TEXT = "918273645546"
VMP_VALUE = 1234.56789012  # a VMP vector value nobody else prints
VMP_TEXT = "56789012"
TENANT_A = [CONTENT, DISTILLATE, SCOPE, ID, KEY_ID, META, TAG, EMB_TEXT]
NEVER_LOGGED = [*TENANT_A, ACTOR, VMP_TEXT, VMP_KEY]


@dataclass
class Seen:
    """Everything the traffic produced: tokens sent, responses got."""

    tokens: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # error bodies, ids allowed in details
    mismatch_details: list[str] = field(default_factory=list)
    successes: list[str] = field(default_factory=list)
    tenant_b: list[str] = field(default_factory=list)  # everything another tenant saw


class Traffic:
    def __init__(self, base_url: str, http: httpx.Client, seen: Seen) -> None:
        self.base = base_url
        self.http = http
        self.seen = seen

    def call(
        self,
        plane: str,
        verb: str,
        args: dict[str, Any],
        *,
        expect: int,
        scope: dict[str, str] | None = None,
        actor: str = ACTOR,
        key: str | None = None,
        raw: bytes | None = None,
        token_key: bytes = KEY.encode(),
        tenant_b: bool = False,
    ) -> Any:
        body = raw if raw is not None else build_envelope(verb, args, idempotency_key=key)
        token = mint_token(
            token_key, plane=plane, verb=verb, body=body, actor=actor, scope=scope or {}
        )
        self.seen.tokens.append(token)
        route = "handshake" if verb == "handshake" else f"{plane}-call"
        response = self.http.post(
            f"{self.base}/{plane}/bifrost/{route}",
            content=body,
            headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
        )
        assert response.status_code == expect, (plane, verb, response.status_code, response.text)
        self._keep(response, tenant_b)
        return response.json() if response.content else None

    def _keep(self, response: httpx.Response, tenant_b: bool) -> None:
        text = response.text
        if tenant_b:
            self.seen.tenant_b.append(text)
        if response.status_code == 200:
            self.seen.successes.append(text)
            return
        body = response.json() if response.content else {}
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and error.get("code", "").endswith("revision_mismatch"):
            self.seen.mismatch_details.append(json.dumps(error.get("details")))
            error = {**error, "details": {}}
            text = json.dumps({**body, "error": error}, ensure_ascii=False)
        self.seen.errors.append(text)

    def vmp(
        self, method: str, path: str, *, expect: int, key: str = VMP_KEY, **kw: Any
    ) -> httpx.Response:
        headers = {"authorization": f"Bearer {key}"}
        if "content" in kw:
            upload = path == "/v1/snapshot/upload"
            headers["content-type"] = "application/octet-stream" if upload else "application/json"
        response = self.http.request(method, f"{self.base}/vmp{path}", headers=headers, **kw)
        assert response.status_code == expect, (path, response.status_code, response.text)
        self._keep(response, tenant_b=False) if response.content else None
        return response


def record(ident: str, scope_value: str = SCOPE) -> dict[str, Any]:
    return {
        "id": ident,
        "embedding": [EMB] + [0.125] * (MEMORY_DIM - 1),
        "scope": {"tenant": scope_value, "end_user": scope_value},
        "content": CONTENT,
        "distillate": DISTILLATE,
    }


def run_traffic(base_url: str, storage: list[Path]) -> Seen:
    """The traffic mix; ends by moving ``storage`` (the database files) away, for 500s."""
    seen = Seen()
    with httpx.Client(timeout=60) as http:
        t = Traffic(base_url, http, seen)
        grant = {"tenant": SCOPE}
        other = {"tenant": "tenant-b"}
        q = [EMB] + [0.125] * (MEMORY_DIM - 1)
        # memory: successes
        t.call(
            "memory", "upsert_many", {"records": [record(ID)]}, expect=200, scope=grant, key=KEY_ID
        )
        t.call(
            "memory", "upsert_many", {"records": [record(ID)]}, expect=200, scope=grant, key=KEY_ID
        )
        t.call("memory", "search", {"vector": q, "top_k": 3}, expect=200, scope=grant)
        t.call("memory", "get", {"chunk_id": ID}, expect=200, scope=grant)
        t.call("memory", "get_many", {"ids": [ID, "nope"]}, expect=200, scope=grant)
        t.call("memory", "handshake", {"client": {"name": CONTENT}}, expect=200)
        # memory: errors
        t.call(
            "memory", "upsert_many", {"records": [record("x")]}, expect=409, scope=grant, key=KEY_ID
        )
        t.call(
            "memory",
            "upsert_many",
            {"records": [record(ID)], "expected_revisions": {ID: 9}},
            expect=409,
            scope=grant,
            key="k2",
        )
        t.call(
            "memory",
            "upsert_many",
            {"records": [record("y", "other")]},
            expect=403,
            scope=grant,
            key="k3",
        )
        bad = {**record(ID), "embedding": [EMB, CONTENT]}
        t.call("memory", "upsert_many", {"records": [bad]}, expect=400, key="k4")
        t.call(
            "memory",
            "upsert_many",
            {"records": [{**record(ID), "scope": {SCOPE: SCOPE}}]},
            expect=400,
            key="k5",
        )
        t.call(
            "memory",
            "upsert_many",
            {"records": [{**record(ID), "revision": CONTENT}]},
            expect=400,
            key="k6",
        )
        t.call(
            "memory",
            "search",
            {"vector": q, "top_k": 3, "scope_all": {"planet": SCOPE}},
            expect=400,
        )
        t.call(
            "memory",
            "search",
            {"vector": q, "top_k": 3, "scope_all": {"tenant": CONTENT}},
            expect=403,
            scope=grant,
        )
        t.call(
            "memory",
            "search",
            {"vector": q, "top_k": 3, "metadata_filter": {CONTENT: SCOPE}},
            expect=400,
        )
        t.call("memory", "search", {"vector": [EMB] * 3, "top_k": 3}, expect=400)
        t.call("memory", "search", {"vector": q, "top_k": 3, CONTENT: SCOPE}, expect=400)
        t.call("memory", CONTENT, {SCOPE: CONTENT}, expect=400)
        t.call("memory", "get", {"chunk_id": ID + "x" * 600}, expect=400)
        for raw in (
            f'{{"wire_version":"0.6","call_id":"c","verb":"get","{CONTENT}":"{SCOPE}"}}'.encode(),
            f'{{"wire_version":"0.6","call_id":"c","verb":"get","args":{{"chunk_id":"{ID}","chunk_id":"{SCOPE}"}}}}'.encode(),
            f'{{"wire_version":"0.6","call_id":"c","verb":"get","args":{{"chunk_id":"{ID}"'.encode(),
            f"{CONTENT} {SCOPE} {EMB}".encode(),
            b'{"wire_version":"0.6","call_id":"c","verb":"get","args":{"x":"\xff'
            + CONTENT.encode()
            + b'"}}',
        ):
            t.call("memory", "get", {}, raw=raw, expect=400)
        # 401: the wrong key, garbage carrying sentinels, a replay
        body = build_envelope("get", {"chunk_id": ID})
        for token in (
            mint_token(
                b"wrong-key-0123456789abcdef0123456789",
                plane="memory",
                verb="get",
                body=body,
                actor=ACTOR,
                scope=grant,
            ),
            f"{CONTENT}.{SCOPE}.{EMB}",
        ):
            seen.tokens.append(token)
            r = http.post(
                f"{base_url}/memory/bifrost/memory-call",
                content=body,
                headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
            )
            assert r.status_code == 401
            t._keep(r, tenant_b=False)
        token = mint_token(
            KEY.encode(), plane="memory", verb="get", body=body, actor=ACTOR, scope=grant
        )
        seen.tokens.append(token)
        for expect in (200, 401):
            r = http.post(
                f"{base_url}/memory/bifrost/memory-call",
                content=body,
                headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
            )
            assert r.status_code == expect
            t._keep(r, tenant_b=False)
        # 413 carrying sentinels (a fresh token: a used one is refused before the body)
        huge = (CONTENT + SCOPE).encode() * (9 * 1024 * 1024 // 40)
        token = mint_token(
            KEY.encode(), plane="memory", verb="get", body=body, actor=ACTOR, scope=grant
        )
        seen.tokens.append(token)
        r = http.post(
            f"{base_url}/memory/bifrost/memory-call",
            content=huge,
            headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
        )
        assert r.status_code == 413
        t._keep(r, tenant_b=False)
        # tenant B looks for A's data every way it can
        t.call(
            "memory", "get", {"chunk_id": ID}, expect=200, scope=other, actor="bob", tenant_b=True
        )
        t.call(
            "memory", "get_many", {"ids": [ID]}, expect=200, scope=other, actor="bob", tenant_b=True
        )
        t.call(
            "memory",
            "search",
            {"vector": q, "top_k": 10},
            expect=200,
            scope=other,
            actor="bob",
            tenant_b=True,
        )
        t.call(
            "memory",
            "search",
            {"vector": q, "top_k": 10, "scope_any": [{"tenant": SCOPE}]},
            expect=200,
            scope=other,
            actor="bob",
            tenant_b=True,
        )
        t.call(
            "memory",
            "search",
            {"vector": q, "top_k": 10, "scope_all": {"tenant": SCOPE}},
            expect=403,
            scope=other,
            actor="bob",
            tenant_b=True,
        )
        t.call(
            "memory",
            "upsert_many",
            {"records": [record(ID, "tenant-b")]},
            expect=403,
            scope=other,
            actor="bob",
            key=KEY_ID,
            tenant_b=True,
        )
        t.call(
            "memory",
            "delete_many",
            {"ids": [ID]},
            expect=200,
            scope=other,
            actor="bob",
            tenant_b=True,
        )
        # affect
        state = {"key": KEY_ID, "scope": {"tenant": SCOPE}, "state": CONTENT, "note": DISTILLATE}
        t.call("affect", "put_many", {"records": [state]}, expect=200, scope=grant, key=KEY_ID)
        t.call(
            "affect",
            "put_many",
            {"records": [{**state, "state": DISTILLATE}]},
            expect=409,
            scope=grant,
            key=KEY_ID,
        )
        t.call(
            "affect",
            "put_many",
            {"records": [state], "expected_revisions": {KEY_ID: 5}},
            expect=409,
            scope=grant,
            key="a2",
        )
        t.call(
            "affect",
            "put_many",
            {"records": [{**state, "recorded_at": CONTENT}]},
            expect=400,
            key="a3",
        )
        t.call(
            "affect",
            "put_many",
            {"records": [{**state, "scope": {"tenant": "x"}}]},
            expect=403,
            scope=grant,
            key="a4",
        )
        t.call("affect", "get", {"key": KEY_ID}, expect=200, scope=grant)
        t.call("affect", "history", {"key": KEY_ID}, expect=200, scope=grant)
        t.call("affect", "list", {"scope_all": {"tenant": SCOPE}}, expect=200, scope=grant)
        t.call("affect", "list", {"scope_all": {"planet": SCOPE}}, expect=400)
        t.call("affect", "history", {"key": KEY_ID, "limit": CONTENT}, expect=400)
        t.call(
            "affect", "get", {"key": KEY_ID}, expect=200, scope=other, actor="bob", tenant_b=True
        )
        t.call(
            "affect",
            "history",
            {"key": KEY_ID},
            expect=200,
            scope=other,
            actor="bob",
            tenant_b=True,
        )
        t.call("affect", "list", {}, expect=200, scope=other, actor="bob", tenant_b=True)
        t.call(
            "affect",
            "delete_many",
            {"keys": [KEY_ID]},
            expect=200,
            scope=other,
            actor="bob",
            tenant_b=True,
        )
        # vmp
        vec = [VMP_VALUE, 1.0, 2.0, 3.0]
        up = t.vmp(
            "POST",
            "/v1/memory/upsert_vector",
            json={"vector": vec, "tags": [TAG], "metadata": {"m": META}},
            expect=200,
        )
        rid = up.json()["memory_id"]
        t.vmp("POST", "/v1/memory/search_vector", json={"query_vector": vec, "k": 3}, expect=200)
        t.vmp("GET", "/v1/memory/meta/get", params={"target_id": rid}, expect=200)
        t.vmp(
            "POST",
            "/v1/memory/meta/set",
            json={"target_id": rid, "metadata": {"m": META}},
            expect=200,
        )
        t.vmp("GET", "/v1/proof/state", expect=200)
        t.vmp(
            "POST",
            "/v1/memory/upsert_vector",
            json={"vector": [VMP_VALUE] * 3, "metadata": META},
            expect=400,
        )
        t.vmp(
            "POST",
            "/v1/memory/upsert_vector",
            json={"vector": [VMP_VALUE, META, 1, 2], "tags": [TAG]},
            expect=400,
        )
        t.vmp(
            "POST",
            "/v1/memory/upsert_vector",
            json={"vector": [99999.5, 1, 2, 3], "metadata": META},
            expect=400,
        )
        t.vmp(
            "POST",
            "/v1/memory/upsert_vector",
            json={"vector": vec, "tags": [TAG, 5], "metadata": META},
            expect=400,
        )
        t.vmp(
            "POST",
            "/v1/memory/upsert_vector",
            json={"vector": vec, "attach_to_document_node": 999, "metadata": META},
            expect=404,
        )
        t.vmp(
            "POST",
            "/v1/memory/upsert_vector",
            content=f'{{"vector":[1,2,3,4],"{META}":"{TAG}"}}',
            expect=400,
        )
        t.vmp(
            "POST",
            "/v1/memory/upsert_vector",
            content=f'{{"vector":[1,2,3,4],"metadata":"{META}"'.encode(),
            expect=400,
        )
        t.vmp(
            "POST",
            "/v1/memory/meta/set",
            json={"target_id": META, "metadata": {"m": META}},
            expect=400,
        )
        t.vmp("POST", "/v1/snapshot/upload", content=(META + TAG).encode() * 10, expect=400)
        t.vmp("GET", "/v1/no-such-route", expect=404)
        r = t.vmp("GET", "/health", key=META, expect=401)
        assert r.content == b""
        # The database files moved away under the running provider: memory and affect
        # answer 503 bifrost.unavailable (retryable: nothing was acknowledged), VMP 500.
        for path in storage:
            path.rename(path.with_name(path.name + ".moved"))
        t.call(
            "memory", "upsert_many", {"records": [record("z")]}, expect=503, scope=grant, key="k9"
        )
        t.call("affect", "put_many", {"records": [state]}, expect=503, scope=grant, key="a9")
        t.vmp(
            "POST",
            "/v1/memory/upsert_vector",
            json={"vector": vec, "tags": [TAG], "metadata": META},
            expect=500,
        )
    return seen


class Collect(logging.Handler):
    """Every record, every way it can be rendered."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.texts: list[str] = []
        self.records = 0
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.records += 1
        self.texts.append(self.format(record))
        self.texts.append(repr(record.msg))
        self.texts.append(repr(record.args))
        if record.exc_info:
            self.texts.append(logging.Formatter().formatException(record.exc_info))
        self.texts.append(json.dumps(record.__dict__, default=repr))


# The test's own HTTP client logs what it sends (httpx at INFO, httpcore at DEBUG);
# those are the caller's records, not the provider's.
CLIENT_LOGGERS = ("httpx", "httpcore", "hpack")
SERVER_LOGGERS = ("", "uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")


@pytest.fixture
def captured() -> Iterator[Collect]:
    handler = Collect()
    handler.addFilter(lambda r: not r.name.startswith(CLIENT_LOGGERS))
    saved = []
    for name in SERVER_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level))
        logger.setLevel(logging.DEBUG)
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger, level in saved:
            logger.removeHandler(handler)
            logger.setLevel(level)


@pytest.fixture
def in_process_server(tmp_path: Path, captured: Collect) -> Iterator[str]:
    """The provider app under uvicorn in a thread of this process, at DEBUG with the
    access log on, so its records reach the handlers above."""
    env = provider_env(tmp_path)
    settings = Settings(
        memory_db=env["RATATOSKR_MEMORY_DB"],
        affect_db=env["RATATOSKR_AFFECT_DB"],
        vmp_db=env["RATATOSKR_VMP_DB"],
        memory_embedding_dim=MEMORY_DIM,
        vmp_dim=4,
        heimdall_key=KEY,
        vmp_api_key=VMP_KEY,
        log_level="debug",
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        build_provider_app(settings),
        log_level="debug",
        access_log=True,
        lifespan="on",
        log_config=None,  # keep our handlers: uvicorn's dictConfig would replace them
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def db_files(root: Path) -> list[Path]:
    env = provider_env(root)
    return [Path(env[f"RATATOSKR_{p}_DB"]) for p in ("MEMORY", "AFFECT", "VMP")]


def _check(seen: Seen, logs: str) -> None:
    secrets = (
        NEVER_LOGGED
        + seen.tokens
        + [t.rsplit(".", 1)[-1] for t in seen.tokens if t.count(".") == 2]
    )
    for secret in secrets:
        assert secret not in logs, f"a sentinel or token leaked into the logs: {secret[:24]}"
    errors = "\n".join(seen.errors)
    for secret in secrets:
        assert secret not in errors, f"a sentinel or token leaked into an error body: {secret[:24]}"
    # Ids in revision_mismatch details are the contract; nothing else is there.
    for details in seen.mismatch_details:
        for secret in [CONTENT, DISTILLATE, SCOPE, EMB_TEXT, ACTOR, *seen.tokens]:
            assert secret not in details
    everything = "\n".join(seen.successes + seen.errors + seen.mismatch_details)
    for secret in [VMP_KEY, *seen.tokens]:
        assert secret not in everything, "a credential came back in a response"
    other = "\n".join(seen.tenant_b)
    for secret in TENANT_A:
        assert secret not in other, "tenant A's data reached tenant B"
    assert any(CONTENT in s for s in seen.successes), "the owner never saw its data: broken harness"


@pytest.mark.slow
def test_no_secret_in_any_log_record_or_response_in_process(
    in_process_server: str, captured: Collect, tmp_path: Path
) -> None:
    seen = run_traffic(in_process_server, db_files(tmp_path))
    metrics = _scrape_metrics(in_process_server)
    assert any("uvicorn.access" in t for t in captured.texts), "the access log was not captured"
    assert any("status=500" in t for t in captured.texts)
    _check(seen, "\n".join(captured.texts))
    _check(seen, metrics)
    report(
        "privacy-in-process",
        {
            "log_records": captured.records,
            "responses": len(seen.successes) + len(seen.errors),
            "error_responses": len(seen.errors),
            "tokens": len(seen.tokens),
            "sentinels": len(NEVER_LOGGED),
            "leaks": 0,
        },
    )


def _scrape_metrics(base_url: str) -> str:
    """``/metrics`` after the traffic: no sentinel or token may be in a label either."""
    r = httpx.get(f"{base_url}/metrics", timeout=30)
    assert r.status_code == 200, r.text
    families = list(text_string_to_metric_families(r.text))
    assert any(f.name == "ratatoskr_requests" and f.samples for f in families), r.text[:500]
    return r.text


@pytest.mark.slow
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_no_secret_in_a_debug_provider_process_output(tmp_path: Path, log_format: str) -> None:
    env = provider_env(tmp_path, RATATOSKR_LOG_LEVEL="debug", RATATOSKR_LOG_FORMAT=log_format)
    with running(tmp_path, env) as server:
        seen = run_traffic(server.base_url, db_files(tmp_path))
        metrics = _scrape_metrics(server.base_url)
        time.sleep(0.2)  # let the last log lines arrive
    output = "".join(server.output)
    assert "bifrost call plane=memory" in output and '"POST /memory/bifrost' in output
    assert "vmp call plane=vmp" in output
    assert "type=StorageUnavailable" in output
    _check(seen, output)
    _check(seen, metrics)
    report(
        "privacy-subprocess",
        {
            "output_lines": len(server.output),
            "responses": len(seen.successes) + len(seen.errors),
            "error_responses": len(seen.errors),
            "tokens": len(seen.tokens),
            "sentinels": len(NEVER_LOGGED),
            "leaks": 0,
        },
    )


@pytest.mark.slow
def test_a_call_id_cannot_forge_log_lines(
    in_process_server: str, captured: Collect, tmp_path: Path
) -> None:
    """The call_id is the caller's and is logged: before the fix a newline in it wrote
    a second, forged line into the provider's log (both the per-call line and the
    internal-error line)."""
    forged = "x status=200\n2026-01-01 00:00:00,000 ERROR ratatoskr FORGED \x1b[31m"
    memory_db = db_files(tmp_path)[0]
    calls: list[tuple[str, str, dict[str, Any]]] = [
        ("memory", "health", {}),
        ("affect", "get", {"key": "k"}),
        ("memory", "upsert_many", {"records": []}),  # a 500: the file is moved away first
    ]
    with httpx.Client(timeout=30) as http:
        for plane, verb, args in calls:
            if verb == "upsert_many":
                memory_db.rename(memory_db.with_name(memory_db.name + ".moved"))
            body = build_envelope(verb, args, call_id=forged, idempotency_key="k")
            token = mint_token(KEY.encode(), plane=plane, verb=verb, body=body, actor="a")
            http.post(
                f"{in_process_server}/{plane}/bifrost/{plane}-call",
                content=body,
                headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
            )

    def forged_lines() -> list[str]:
        return [t for t in captured.texts if "FORGED" in t and not t.startswith(("{", "'", "("))]

    # The per-call line is logged once the answer is on its way: the client can have it
    # first (seen once in a fresh-clone run on a loaded host: 3 of the 4 lines).
    deadline = time.monotonic() + 30
    while len(forged_lines()) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    lines = forged_lines()
    assert len(lines) >= 4  # three call lines and one internal-error line
    assert any("type=StorageUnavailable" in t for t in lines)
    for line in lines:
        assert "\n" not in line and "\x1b" not in line, line
