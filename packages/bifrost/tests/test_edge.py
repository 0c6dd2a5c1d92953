"""The plane apps' call routes on plain ASGI messages (bifrost.consumer.edge): what
Starlette's request and response did for them, they still do."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

import orjson
import pytest
from starlette.responses import Response
from starlette.testclient import TestClient

from bifrost.auth import JwtVerifier, mint_token
from bifrost.consumer import ConsumerRegistration, build_memory_app
from bifrost.consumer.app import PlaneApp
from bifrost.consumer.testing.support import KEY, SpyMemoryStore, envelope_bytes

ROUTE = "/bifrost/memory-call"


def _app(store: SpyMemoryStore) -> PlaneApp:
    app = build_memory_app(store, JwtVerifier(KEY), ConsumerRegistration())
    assert isinstance(app, PlaneApp)
    return app


def _headers(body: bytes, verb: str = "health", **extra: str) -> list[tuple[bytes, bytes]]:
    token = mint_token(KEY, plane="memory", verb=verb, body=body, actor="edge")
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json", **extra}
    return [(k.encode(), v.encode()) for k, v in headers.items()]


def _scope(headers: list[tuple[bytes, bytes]], method: str = "POST", path: str = ROUTE) -> Any:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }


def _call(app: PlaneApp, scope: Any, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        if queue:
            return queue.pop(0)
        await asyncio.sleep(30)  # pragma: no cover - the app must not read past the body
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))

    asyncio.run(app(scope, receive, send))
    return sent


def _answer(sent: list[dict[str, Any]]) -> tuple[int, dict[str, Any], list[Any]]:
    start, body = sent
    assert start["type"] == "http.response.start" and body["type"] == "http.response.body"
    return start["status"], orjson.loads(body["body"]), start["headers"]


def test_a_body_in_several_messages_is_one_body() -> None:
    store = SpyMemoryStore()
    body = envelope_bytes("health")
    parts = [body[:5], b"", body[5:20], body[20:]]
    messages = [{"type": "http.request", "body": p, "more_body": True} for p in parts]
    messages.append({"type": "http.request", "body": b"", "more_body": False})
    status, answer, _ = _answer(_call(_app(store), _scope(_headers(body)), messages))
    assert (status, answer["ok"]) == (200, True)
    assert store.calls == ["health"]


def test_a_client_gone_before_the_body_ends_reaches_no_store() -> None:
    store = SpyMemoryStore()
    body = envelope_bytes("health")
    messages: list[dict[str, Any]] = [
        {"type": "http.request", "body": body[:10], "more_body": True},
        {"type": "http.disconnect"},
    ]
    status, answer, _ = _answer(_call(_app(store), _scope(_headers(body)), messages))
    assert status == 500 and answer["ok"] is False
    assert store.calls == []


def test_the_answer_s_headers_are_starlette_s() -> None:
    store = SpyMemoryStore()
    body = envelope_bytes("health")
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent = _call(_app(store), _scope(_headers(body)), messages)
    content = sent[1]["body"]
    assert sent[0]["headers"] == Response(content, media_type="application/json").raw_headers


def test_the_first_of_repeated_headers_counts() -> None:
    store = SpyMemoryStore()
    body = envelope_bytes("health")
    good = _headers(body)
    bad = [(b"authorization", b"Bearer not-a-token"), (b"content-type", b"text/plain")]
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    assert _answer(_call(_app(store), _scope(good + bad), messages))[0] == 200
    assert _answer(_call(_app(store), _scope(bad + good), list(messages)))[0] == 401


@pytest.mark.parametrize(
    ("length", "status"), [("abc", 400), ("99999999999", 413), ("-5", 200), ("3", 200)]
)
def test_content_length_judged_as_before(length: str, status: int) -> None:
    store = SpyMemoryStore()
    body = envelope_bytes("health")
    headers = _headers(body, **{"content-length": length})
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    assert _answer(_call(_app(store), _scope(headers), messages))[0] == status


def test_other_methods_and_paths_are_starlette_s() -> None:
    store = SpyMemoryStore()
    with TestClient(_app(store)) as client:
        assert client.get(ROUTE).status_code == 405
        assert client.put(ROUTE).status_code == 405
        assert client.post("/bifrost/nowhere").status_code == 404
        assert client.post(ROUTE + "/", follow_redirects=False).status_code == 307
    assert store.calls == []
