"""No content, distillate, embedding, scope value or token material in any log
record (at any level) nor in any error response body."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from starlette.testclient import TestClient

from bifrost.consumer import ConsumerRegistration, build_affect_app, build_memory_app
from bifrost.consumer.testing import InMemoryAffectStore
from bifrost.consumer.testing.support import DIM, KEY, SpyMemoryStore, Wire, envelope_bytes
from bifrost.reference_server import JwtVerifier

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CONTENT = "SENTINEL-CONTENT-91c2"
DISTILLATE = "SENTINEL-DISTILLATE-44ab"
SCOPE = "SENTINEL-SCOPE-e7d0"
EMB = 0.918273645546372  # an embedding value nobody else prints
EMB_TEXT = "918273645546"
ALL = [CONTENT, DISTILLATE, SCOPE, EMB_TEXT]


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.texts: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(self.format(record))
        self.texts.append(repr(record.msg))
        self.texts.append(repr(record.args))
        if record.exc_info:
            self.texts.append(logging.Formatter().formatException(record.exc_info))
        self.texts.append(json.dumps(record.__dict__, default=repr))


class Exploding(SpyMemoryStore):
    def get_many(self, ids: list[str]) -> list[dict[str, Any]]:
        raise RuntimeError(f"boom {CONTENT} {SCOPE} {EMB}")

    def scopes_of(self, ids: list[str]) -> dict[str, dict[str, str]]:
        raise RuntimeError(f"boom {CONTENT} {SCOPE} {EMB}")

    def perform_delete(self, ids: Sequence[str], grant: Mapping[str, str]) -> int:
        raise RuntimeError(f"boom {CONTENT} {SCOPE} {EMB}")


@pytest.fixture
def collected(caplog: pytest.LogCaptureFixture) -> Iterator[Collect]:
    caplog.set_level(logging.DEBUG)
    handler = Collect()
    root = logging.getLogger()
    old = root.level
    root.setLevel(logging.DEBUG)
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


def record(cid: str, scope_value: str = SCOPE) -> dict[str, Any]:
    emb = [EMB] + [0.1] * (DIM - 1)
    return {
        "id": cid,
        "embedding": emb,
        "scope": {"tenant": scope_value},
        "content": CONTENT,
        "distillate": DISTILLATE,
    }


def test_no_sentinel_in_logs_or_error_bodies(
    collected: Collect, caplog: pytest.LogCaptureFixture
) -> None:
    tokens: list[str] = []
    bodies: list[str] = []
    verifier = JwtVerifier(KEY)
    mem_app = build_memory_app(SpyMemoryStore(DIM), verifier, ConsumerRegistration())
    boom_app = build_memory_app(Exploding(DIM), JwtVerifier(KEY), ConsumerRegistration())
    aff_app = build_affect_app(InMemoryAffectStore(), JwtVerifier(KEY), ConsumerRegistration())

    def send(wire: Wire, verb: str, args: dict[str, Any], *, expect: int, **kw: Any) -> None:
        extra = {"idempotency_key": kw.pop("key")} if "key" in kw else {}
        route = kw.pop("route", None)
        body = envelope_bytes(verb, args, **extra)
        tok = wire.token(body, verb, **kw)
        tokens.append(tok)
        resp = wire.post_raw(body, tok, route=route)
        assert resp.status_code == expect, resp.text
        if expect != 200:
            bodies.append(resp.text)

    with TestClient(mem_app) as c1, TestClient(boom_app) as c2, TestClient(aff_app) as c3:
        m, b, a = Wire(c1, "memory"), Wire(c2, "memory"), Wire(c3, "affect")
        grant = {"tenant": SCOPE}
        q = record("q")["embedding"]
        send(
            m,
            "upsert_many",
            {"records": [record("r1"), record("r2")]},
            expect=200,
            key="k1",
            scope=grant,
        )
        send(
            m,
            "upsert_many",
            {"records": [record("r1"), record("r2")]},
            expect=200,
            key="k1",
            scope=grant,
        )
        send(
            m,
            "search",
            {"vector": q, "top_k": 5, "scope_all": {"tenant": SCOPE}},
            expect=200,
            scope=grant,
        )
        send(m, "get", {"chunk_id": "r1"}, expect=200, scope=grant)
        send(m, "get_many", {"ids": ["r1", "r2"]}, expect=200, scope=grant)
        # error paths
        send(m, "upsert_many", {"records": [record("r3")]}, expect=409, key="k1", scope=grant)
        send(
            m,
            "upsert_many",
            {"records": [record("r1")], "expected_revisions": {"r1": 9}},
            expect=409,
            key="k2",
            scope=grant,
        )
        send(
            m,
            "upsert_many",
            {"records": [record("r4", "other")]},
            expect=403,
            key="k3",
            scope=grant,
        )
        bad = {**record("r5"), "embedding": [EMB, CONTENT]}
        send(m, "upsert_many", {"records": [bad]}, expect=400, key="k4")
        send(
            m,
            "upsert_many",
            {"records": [{**record("r6"), "scope": {SCOPE: SCOPE}}]},
            expect=400,
            key="k5",
        )
        send(m, "search", {"vector": q, "top_k": 5, "scope_all": {"planet": SCOPE}}, expect=400)
        send(
            m,
            "search",
            {"vector": q, "top_k": 5, "scope_all": {"tenant": "x"}},
            expect=403,
            scope=grant,
        )
        send(
            m, "search", {"vector": q, "top_k": 5, "metadata_filter": {CONTENT: SCOPE}}, expect=400
        )
        send(m, "search", {"vector": [EMB, EMB], "top_k": 5}, expect=400)
        send(m, "search", {"vector": q, "top_k": 5, CONTENT: SCOPE}, expect=400)
        send(m, CONTENT, {"x": SCOPE}, expect=400)
        send(
            m,
            "handshake",
            {"plane": "memory", "client": {"name": CONTENT}},
            expect=200,
            route="/bifrost/handshake",
        )
        send(b, "delete_many", {"ids": ["r1"]}, expect=500, scope=grant)
        send(m, "delete_many", {"ids": ["r1", "r2"]}, expect=200, scope=grant)
        # malformed bodies carrying sentinels
        for raw in (
            json.dumps(
                {"wire_version": "0.6", "call_id": "c", "verb": "get", CONTENT: SCOPE}
            ).encode(),
            f'{{"wire_version": "0.6", "call_id": "c", "verb": "x", "a": "{CONTENT}", '
            f'"a": "{SCOPE}"}}'.encode(),
            f"{CONTENT} {SCOPE}".encode(),
        ):
            tok = m.token(raw, "get")
            tokens.append(tok)
            resp = m.post_raw(raw, tok)
            assert resp.status_code == 400
            bodies.append(resp.text)
        # unauthenticated: a wrong-key token and a garbage token carrying a sentinel
        body = envelope_bytes("health")
        for tok in (
            m.token(body, "health", key=b"wrong-key-0123456789abcdef-0123456"),
            f"{CONTENT}.{SCOPE}.{EMB}",
        ):
            tokens.append(tok)
            resp = m.post_raw(body, tok)
            assert resp.status_code == 401
            bodies.append(resp.text)
        # affect plane
        arec = {"key": "k", "scope": {"tenant": SCOPE}, "state": CONTENT}
        send(a, "put_many", {"records": [arec]}, expect=200, key="i", scope=grant)
        send(
            a,
            "put_many",
            {"records": [{**arec, "state": DISTILLATE}]},
            expect=409,
            key="i",
            scope=grant,
        )
        send(a, "put_many", {"records": [{**arec, "revision": CONTENT}]}, expect=400, key="i2")
        send(a, "list", {"scope_all": {"tenant": SCOPE}}, expect=200, scope=grant)
        send(a, "list", {"scope_all": {"planet": SCOPE}}, expect=400)
        send(a, "history", {"key": "k"}, expect=200, scope=grant)

    assert collected.texts, "nothing was logged at all: the capture is broken"
    assert any("status=500" in t for t in collected.texts)
    secrets = ALL + tokens + [t.rsplit(".", 1)[-1] for t in tokens if t.count(".") == 2]
    haystacks = {"log": "\n".join(collected.texts) + caplog.text, "bodies": "\n".join(bodies)}
    for where, text in haystacks.items():
        for secret in secrets:
            if secret:
                assert secret not in text, f"a sentinel leaked into {where}"
