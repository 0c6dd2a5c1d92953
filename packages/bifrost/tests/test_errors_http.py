"""Every error code of the wire spec's table, produced through the HTTP app
with its documented status."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.testclient import TestClient

from bifrost.consumer import ConsumerRegistration, build_memory_app
from bifrost.consumer.testing.support import DIM, KEY, SpyMemoryStore, Wire, chunk, envelope_bytes
from bifrost.reference_server import JwtVerifier

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def error(resp: Any, status: int, code: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["ok"] is False
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str)
    assert isinstance(body["error"]["details"], dict)
    return dict(body)


def test_success_shape(memory_wire: Wire) -> None:
    body = envelope_bytes("health")
    resp = memory_wire.post_raw(body, memory_wire.token(body, "health"))
    assert resp.status_code == 200
    payload = resp.json()
    assert payload == {
        "ok": True,
        "call_id": json.loads(body)["call_id"],
        "result": {
            "status": "ok",
            "plane": "memory",
            "embedding_dim": DIM,
            "distance": "cosine",
            "max_batch": 1000,
            "max_top_k": 1000,
            "max_page": 1000,
        },
    }


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1, 2]",
        b'{"wire_version": "0.6", "call_id": "c", "verb": "health", "extra": 1}',
        b'{"wire_version": "0.6", "call_id": "c", "verb": 7}',
        b'{"wire_version": "0.6", "call_id": "c", "verb": "health", "args": []}',
        b'{"wire_version": "0.6", "verb": "health"}',
        b'{"wire_version": "0.6", "call_id": "c", "verb": "health", "args": {"a": NaN}}',
    ],
)
def test_malformed_envelope(memory_wire: Wire, body: bytes) -> None:
    verb = "health"
    resp = memory_wire.post_raw(body, memory_wire.token(body, verb))
    out = error(resp, 400, "bifrost.malformed_envelope")
    assert out["call_id"] is None


def test_unsupported_wire_version(memory_wire: Wire) -> None:
    body = json.dumps({"wire_version": "0.5", "call_id": "c", "verb": "health"}).encode()
    error(
        memory_wire.post_raw(body, memory_wire.token(body, "health")),
        400,
        "bifrost.unsupported_wire_version",
    )


def test_unknown_verb(memory_wire: Wire) -> None:
    out = error(memory_wire.call("frobnicate"), 400, "bifrost.unknown_verb")
    assert out["call_id"].startswith("call-")


def test_handshake_verb_not_served_on_call_route(memory_wire: Wire) -> None:
    error(memory_wire.call("handshake"), 400, "bifrost.unknown_verb")


def test_unauthenticated(memory_wire: Wire) -> None:
    error(memory_wire.post_raw(envelope_bytes("health"), None), 401, "bifrost.unauthenticated")


def test_forbidden(memory_wire: Wire) -> None:
    resp = memory_wire.call(
        "search",
        {"vector": chunk("q", 0)["embedding"], "top_k": 1, "scope_all": {"tenant": "other"}},
        scope={"tenant": "mine"},
    )
    error(resp, 403, "bifrost.forbidden")


@pytest.mark.parametrize(
    "verb",
    [
        "upsert_edges",
        "get_edges_for",
        "mark_invalid",
        "mark_superseded",
        "patch_many",
        "atomic_supersede",
        "acquire_lease",
        "get_checkpoint",
    ],
)
def test_unsupported_verb(memory_wire: Wire, memory_store: SpyMemoryStore, verb: str) -> None:
    error(memory_wire.call(verb), 501, "memory.unsupported_verb")
    assert memory_store.calls == []


def test_payload_too_large_content_length(memory_store: SpyMemoryStore) -> None:
    app = build_memory_app(
        memory_store, JwtVerifier(KEY), ConsumerRegistration(max_body_bytes=2048)
    )
    with TestClient(app) as client:
        wire = Wire(client, "memory")
        body = envelope_bytes(
            "upsert_many", {"records": [{"pad": "x" * 4096}]}, idempotency_key="k"
        )
        resp = wire.post_raw(body, wire.token(body, "upsert_many"))
        error(resp, 413, "bifrost.payload_too_large")
        small = envelope_bytes("health")
        assert wire.post_raw(small, wire.token(small, "health")).status_code == 200
    assert memory_store.calls == ["health"]


def test_payload_too_large_streamed(memory_store: SpyMemoryStore) -> None:
    app = build_memory_app(
        memory_store, JwtVerifier(KEY), ConsumerRegistration(max_body_bytes=2048)
    )

    def chunks() -> Any:
        for _ in range(10):
            yield b" " * 1024

    with TestClient(app) as client:
        # Streamed with a valid token (for another body: the size limit comes first).
        token = Wire(client, "memory").token(b"x", "upsert_many")
        resp = client.post(
            "/bifrost/memory-call",
            content=chunks(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        assert "content-length" not in {k.lower() for k in resp.request.headers}
        error(resp, 413, "bifrost.payload_too_large")
    assert memory_store.calls == []


def test_body_never_read_without_a_valid_token(memory_store: SpyMemoryStore) -> None:
    """Order of work: an unauthenticated caller gets 401 before its body is read,
    however large it says the body is."""
    app = build_memory_app(
        memory_store, JwtVerifier(KEY), ConsumerRegistration(max_body_bytes=2048)
    )

    def chunks() -> Any:
        for _ in range(10):
            yield b" " * 1024

    with TestClient(app) as client:
        resp = client.post("/bifrost/memory-call", content=chunks())
        error(resp, 401, "bifrost.unauthenticated")
        resp = client.post(
            "/bifrost/memory-call",
            content=chunks(),
            headers={"Authorization": "Bearer not.a.token"},
        )
        error(resp, 401, "bifrost.unauthenticated")
    assert memory_store.calls == []


def test_invalid_arguments(memory_wire: Wire) -> None:
    resp = memory_wire.call("search", {"vector": [1.0, 0.0], "top_k": 1})
    out = error(resp, 400, "memory.invalid_arguments")
    assert "2 != 8" in out["error"]["message"]
    error(memory_wire.call("get", {"chunk_id": "a", "bogus": 1}), 400, "memory.invalid_arguments")
    error(memory_wire.call("get", {}), 400, "memory.invalid_arguments")


def test_invalid_filter(memory_wire: Wire) -> None:
    resp = memory_wire.call(
        "search", {"vector": chunk("q", 0)["embedding"], "top_k": 1, "scope_all": {"planet": "x"}}
    )
    error(resp, 400, "memory.invalid_filter")


def test_idempotency_conflict(memory_wire: Wire) -> None:
    memory_wire.ok("upsert_many", {"records": [chunk("a", 0)]}, idempotency_key="k")
    resp = memory_wire.call("upsert_many", {"records": [chunk("b", 1)]}, idempotency_key="k")
    error(resp, 409, "memory.idempotency_conflict")


def test_revision_mismatch(memory_wire: Wire) -> None:
    memory_wire.ok("upsert_many", {"records": [chunk("a", 0)]}, idempotency_key="k1")
    resp = memory_wire.call(
        "upsert_many",
        {"records": [chunk("a", 1)], "expected_revisions": {"a": 3}},
        idempotency_key="k2",
    )
    out = error(resp, 409, "memory.revision_mismatch")
    assert out["error"]["details"] == {"id": "a", "expected": 3, "actual": 1}


class ExplodingStore(SpyMemoryStore):
    def health(self) -> dict[str, Any]:
        raise RuntimeError("SECRET-CONTENT in an exception text")


def test_internal(caplog: pytest.LogCaptureFixture) -> None:
    app = build_memory_app(ExplodingStore(), JwtVerifier(KEY), ConsumerRegistration())
    with TestClient(app) as client:
        wire = Wire(client, "memory")
        resp = wire.call("health")
    out = error(resp, 500, "bifrost.internal")
    assert out["error"]["message"] == "internal error"
    assert "SECRET" not in resp.text
    assert "SECRET" not in caplog.text
    assert out["call_id"] in caplog.text


# --- the affect plane's prefixed codes ----------------------------------------------
def test_affect_codes(affect_wire: Wire) -> None:
    rec = {"key": "k", "scope": {}, "v": 1}
    error(affect_wire.call("put_many", {"records": [rec]}), 400, "affect.invalid_arguments")
    error(affect_wire.call("list", {"scope_all": {"planet": "p"}}), 400, "affect.invalid_filter")
    affect_wire.ok("put_many", {"records": [rec]}, idempotency_key="i")
    error(
        affect_wire.call("put_many", {"records": [{**rec, "v": 2}]}, idempotency_key="i"),
        409,
        "affect.idempotency_conflict",
    )
    out = error(
        affect_wire.call(
            "put_many",
            {"records": [rec], "expected_revisions": {"k": 0}},
            idempotency_key="i2",
        ),
        409,
        "affect.revision_mismatch",
    )
    assert out["error"]["details"] == {"id": "k", "expected": 0, "actual": 1}
    error(affect_wire.call("scan"), 400, "bifrost.unknown_verb")


def test_handshake(memory_wire: Wire, affect_wire: Wire) -> None:
    res = memory_wire.ok(
        "handshake",
        {"plane": "memory", "client": {"name": "worldtree"}},
        route="/bifrost/handshake",
    )
    assert res["wire_version"] == "0.6"
    assert res["plane"] == "memory"
    assert res["consumer_id"] == "ratatoskr"
    assert res["capabilities"]["optimistic_locking_supported"] is True
    assert "search" in res["verbs"]
    assert "scan" in res["verbs"]
    res = affect_wire.ok("handshake", {"plane": "affect"}, route="/bifrost/handshake")
    assert res["capabilities"]["history_supported"] is True
    resp = memory_wire.call("handshake", {"plane": "affect"}, route="/bifrost/handshake")
    error(resp, 400, "memory.invalid_arguments")
    error(memory_wire.call("health", route="/bifrost/handshake"), 400, "bifrost.unknown_verb")


def test_get_method_not_allowed(memory_wire: Wire) -> None:
    client = memory_wire.client
    assert isinstance(client, TestClient)  # a Wire only needs post; this one can GET
    assert client.get("/bifrost/memory-call").status_code == 405


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"],
)
def test_only_json_bodies_are_read(memory_wire: Wire, content_type: str | None) -> None:
    """A page in a browser can POST cross-site without a preflight only as a form or
    text/plain: such a request never reaches the store, even with a valid token."""
    body = envelope_bytes("health")
    headers = {} if content_type is None else {"content-type": content_type}
    resp = memory_wire.client.post(
        "/bifrost/memory-call",
        content=body,
        headers={"authorization": f"Bearer {memory_wire.token(body, 'health')}", **headers},
    )
    out = error(resp, 400, "bifrost.malformed_envelope")
    assert out["error"]["message"] == "body must be sent as application/json"
    ok = memory_wire.post_raw(body, memory_wire.token(body, "health"))
    assert ok.status_code == 200
    charset = memory_wire.post_raw(
        body,
        memory_wire.token(body, "health"),
        **{"content-type": "application/json; charset=utf-8"},
    )
    assert charset.status_code == 200
