"""Test support for wire-level tests: a spy store that records which verbs
reached it, envelope bytes, and ``Wire``, which signs (with a per-dispatch
token) and posts envelopes to one plane app through any synchronous HTTP client
(:class:`bifrost.httpclient.SyncHttpClient`: an ``httpx.Client``, Starlette's
``TestClient``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from bifrost.client import mint_token
from bifrost.consumer.testing.memory_store import InMemoryMemoryStore
from bifrost.httpclient import HttpResponse, SyncHttpClient
from bifrost.memory.dispatch import MEMORY_VERBS

KEY = b"test-key-0123456789abcdef-0123456789"
DIM = 8


class SpyMemoryStore(InMemoryMemoryStore):
    """The reference store, recording which verbs reached it (each verb of the memory
    plane's table, by name, in :attr:`calls`)."""

    def __init__(self, embedding_dim: int = DIM, **kw: Any) -> None:
        super().__init__(embedding_dim, **kw)
        self.calls: list[str] = []


def _recorded(verb: str) -> Callable[..., Any]:
    """``verb`` of the reference store, noting first that it was called."""

    def call(self: SpyMemoryStore, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(verb)
        return getattr(super(SpyMemoryStore, self), verb)(*args, **kwargs)

    call.__name__ = verb
    call.__qualname__ = f"SpyMemoryStore.{verb}"
    return call


for _verb in MEMORY_VERBS:
    setattr(SpyMemoryStore, _verb, _recorded(_verb))


def envelope_bytes(verb: str, args: dict[str, Any] | None = None, **extra: Any) -> bytes:
    env: dict[str, Any] = {
        "wire_version": "0.6",
        "call_id": f"call-{uuid.uuid4()}",
        "verb": verb,
        "args": args or {},
    }
    env.update(extra)
    return json.dumps(env).encode()


class Wire:
    """Signs and posts envelopes to one plane app."""

    def __init__(self, client: SyncHttpClient, plane: str, key: bytes = KEY) -> None:
        self.client = client
        self.plane = plane
        self.key = key

    def token(
        self,
        body: bytes,
        verb: str,
        *,
        actor: str = "agent-a",
        scope: dict[str, str] | None = None,
        plane: str | None = None,
        key: bytes | None = None,
        **kw: Any,
    ) -> str:
        return mint_token(
            self.key if key is None else key,
            plane=plane or self.plane,
            verb=verb,
            body=body,
            actor=actor,
            scope=scope,
            **kw,
        )

    def post_raw(
        self, body: bytes, token: str | None, *, route: str | None = None, **headers: str
    ) -> HttpResponse:
        hdrs = {"content-type": "application/json", **headers}
        if token is not None:
            hdrs["authorization"] = f"Bearer {token}"
        return self.client.post(route or f"/bifrost/{self.plane}-call", content=body, headers=hdrs)

    def call(
        self,
        verb: str,
        args: dict[str, Any] | None = None,
        *,
        actor: str = "agent-a",
        scope: dict[str, str] | None = None,
        idempotency_key: str | None = None,
        route: str | None = None,
    ) -> HttpResponse:
        extra: dict[str, Any] = {}
        if idempotency_key is not None:
            extra["idempotency_key"] = idempotency_key
        body = envelope_bytes(verb, args, **extra)
        tok = self.token(body, verb, actor=actor, scope=scope)
        return self.post_raw(body, tok, route=route)

    def ok(self, verb: str, args: dict[str, Any] | None = None, **kw: Any) -> Any:
        resp = self.call(verb, args, **kw)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["ok"] is True
        return body["result"]


def chunk(cid: str, i: int, scope: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    emb = [0.0] * DIM
    emb[i % DIM] = 1.0
    return {"id": cid, "embedding": emb, "scope": dict(scope or {}), **extra}
