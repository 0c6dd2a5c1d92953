"""The JWT matrix through the app (each 401, the store never called) and the
verifier's own rules (clock, leeway, token cache)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import uuid
from typing import Any

import jwt
import pytest

from bifrost.auth import InMemoryTokenCache, JwtVerifier
from bifrost.client import mint_token
from bifrost.consumer.testing.support import KEY, SpyMemoryStore, Wire, envelope_bytes
from bifrost.errors import Unauthenticated

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def claims(body: bytes, **over: Any) -> dict[str, Any]:
    now = int(time.time())
    c: dict[str, Any] = {
        "iss": "heimdall",
        "aud": "ratatoskr",
        "sub": "agent-a",
        "iat": now,
        "exp": now + 60,
        "jti": str(uuid.uuid4()),
        "bifrost": {
            "plane": "memory",
            "verb": "health",
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "scope": {},
        },
    }
    for k, v in over.items():
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v
    return c


def bif(body: bytes, **over: Any) -> dict[str, Any]:
    """The ``bifrost`` claim for ``body`` with overrides (None removes a key)."""
    out: dict[str, Any] = dict(claims(body)["bifrost"])
    for k, v in over.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def handmade(header: dict[str, Any], payload: dict[str, Any], key: bytes | None) -> str:
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    if key is None:
        return signing_input + "."
    sig = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(sig)}"


def hs256(payload: dict[str, Any], key: bytes = KEY) -> str:
    return jwt.encode(payload, key, algorithm="HS256")


BODY = envelope_bytes("health")


def t() -> int:
    return int(time.time())


CASES: dict[str, Any] = {
    "alg none": lambda b: handmade({"alg": "none", "typ": "JWT"}, claims(b), None),
    "alg HS512": lambda b: jwt.encode(claims(b), KEY * 2, algorithm="HS512"),
    "alg RS256 header": lambda b: handmade({"alg": "RS256", "typ": "JWT"}, claims(b), KEY),
    "alg hs256 lowercase": lambda b: handmade({"alg": "hs256", "typ": "JWT"}, claims(b), KEY),
    "wrong key": lambda b: hs256(claims(b), b"another-key-0123456789abcdef-0123"),
    "wrong aud": lambda b: hs256(claims(b, aud="someone-else")),
    "aud list holding ours": lambda b: hs256(claims(b, aud=["other", "ratatoskr"])),
    "aud list of ours only": lambda b: hs256(claims(b, aud=["ratatoskr"])),
    "wrong iss": lambda b: hs256(claims(b, iss="loki")),
    "expired": lambda b: hs256(claims(b, iat=t() - 400, exp=t() - 120)),
    "nbf in future": lambda b: hs256(claims(b, nbf=t() + 120)),
    "iat in future": lambda b: hs256(claims(b, iat=t() + 120, exp=t() + 180)),
    "lifetime over max": lambda b: hs256(claims(b, iat=t(), exp=t() + 301)),
    "missing jti": lambda b: hs256(claims(b, jti=None)),
    "missing sub": lambda b: hs256(claims(b, sub=None)),
    "missing exp": lambda b: hs256(claims(b, exp=None)),
    "missing iat": lambda b: hs256(claims(b, iat=None)),
    "missing bifrost": lambda b: hs256(claims(b, bifrost=None)),
    "bifrost not object": lambda b: hs256(claims(b, bifrost="memory")),
    "missing scope grant": lambda b: hs256(claims(b, bifrost=bif(b, scope=None))),
    "malformed scope grant": lambda b: hs256(claims(b, bifrost=bif(b, scope={"planet": "x"}))),
    "scope grant not flat": lambda b: hs256(claims(b, bifrost=bif(b, scope={"tenant": {"a": 1}}))),
    "missing body_sha256": lambda b: hs256(claims(b, bifrost=bif(b, body_sha256=None))),
    "body changed after signing": lambda b: hs256(
        claims(b, bifrost=bif(b, body_sha256=hashlib.sha256(b + b" ").hexdigest()))
    ),
    "token for another verb": lambda b: hs256(claims(b, bifrost=bif(b, verb="search"))),
    "token for the other plane": lambda b: hs256(claims(b, bifrost=bif(b, plane="affect"))),
    "garbage": lambda b: "not.a.jwt",
    "empty": lambda b: "",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_matrix(memory_wire: Wire, memory_store: SpyMemoryStore, case: str) -> None:
    token = CASES[case](BODY)
    resp = memory_wire.post_raw(BODY, token)
    assert resp.status_code == 401, (case, resp.text)
    assert resp.json()["error"]["code"] == "bifrost.unauthenticated"
    if token:
        assert token not in resp.text
    assert memory_store.calls == []


def test_no_token(memory_wire: Wire, memory_store: SpyMemoryStore) -> None:
    resp = memory_wire.post_raw(BODY, None)
    assert resp.status_code == 401
    good = hs256(claims(BODY))
    resp = memory_wire.client.post(
        "/bifrost/memory-call", content=BODY, headers={"authorization": f"Basic {good}"}
    )
    assert resp.status_code == 401
    assert memory_store.calls == []


def test_body_changed_after_signing(memory_wire: Wire, memory_store: SpyMemoryStore) -> None:
    token = hs256(claims(BODY))
    tampered = BODY.replace(b'"health"', b'"health" ')
    assert memory_wire.post_raw(tampered, token).status_code == 401
    assert memory_store.calls == []


def test_replayed_jti(memory_wire: Wire, memory_store: SpyMemoryStore) -> None:
    token = hs256(claims(BODY))
    assert memory_wire.post_raw(BODY, token).status_code == 200
    assert memory_store.calls == ["health"]
    resp = memory_wire.post_raw(BODY, token)
    assert resp.status_code == 401
    assert resp.json()["error"]["message"] == "token replayed"
    # A fresh token with the same jti but another body is a replay too.
    other = envelope_bytes("health")
    c = claims(other)
    c["jti"] = jwt.decode(token, options={"verify_signature": False})["jti"]
    assert memory_wire.post_raw(other, hs256(c)).status_code == 401
    assert memory_store.calls == ["health"]


def test_envelope_verb_must_match_token(memory_wire: Wire, memory_store: SpyMemoryStore) -> None:
    body = envelope_bytes("describe_store")
    token = memory_wire.token(body, "health")
    resp = memory_wire.post_raw(body, token)
    assert resp.status_code == 401
    assert memory_store.calls == []


def test_valid_token_accepted(memory_wire: Wire, memory_store: SpyMemoryStore) -> None:
    assert memory_wire.post_raw(BODY, hs256(claims(BODY))).status_code == 200
    # Inside the leeway: expired 20 s ago is still accepted (skew allowance 30 s).
    body = envelope_bytes("health")
    now = t()
    late = hs256(claims(body, iat=now - 200, exp=now - 20))
    assert memory_wire.post_raw(body, late).status_code == 200


# --- the verifier on its own ------------------------------------------------------------
class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_empty_key_rejected() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        JwtVerifier(b"")
    with pytest.raises(TypeError):
        JwtVerifier("text-key")  # type: ignore[arg-type]


def test_injected_clock_and_leeway() -> None:
    clock = Clock(1_000_000.0)
    v = JwtVerifier(KEY, clock=clock, leeway_s=5, max_lifetime_s=60)
    body = b"{}"

    def tok() -> str:
        return mint_token(
            KEY, plane="memory", verb="get", body=body, actor="a", now=1_000_000.0, lifetime_s=60
        )

    assert v.verify(tok(), body=body, plane="memory", verb="get").actor == "a"
    clock.t = 1_000_000.0 + 64
    assert v.verify(tok(), body=body, plane="memory", verb="get").verb == "get"
    clock.t = 1_000_000.0 + 66
    with pytest.raises(Unauthenticated, match="expired"):
        v.verify(tok(), body=body, plane="memory", verb="get")
    clock.t = 1_000_000.0 - 6
    with pytest.raises(Unauthenticated, match="future"):
        v.verify(tok(), body=body, plane="memory", verb="get")


def test_claims_to_context() -> None:
    v = JwtVerifier(KEY)
    body = b"{}"
    token = mint_token(
        KEY, plane="affect", verb="list", body=body, actor="who", scope={"tenant": "t"}, jti="jti-1"
    )
    c = v.verify(token, body=body, plane="affect", verb=None)
    ctx = c.context("call-1")
    assert (ctx.actor, ctx.scope, ctx.plane, ctx.verb, ctx.token_id, ctx.call_id) == (
        "who",
        {"tenant": "t"},
        "affect",
        "list",
        "jti-1",
        "call-1",
    )
    assert "jti" not in repr(v)


def test_messages_never_echo_token() -> None:
    v = JwtVerifier(KEY)
    body = b"{}"
    token = mint_token(
        b"wrong-key-0123456789abcdef-012345", plane="memory", verb="get", body=body, actor="a"
    )
    with pytest.raises(Unauthenticated) as info:
        v.verify(token, body=body, plane="memory", verb="get")
    assert token not in str(info.value)
    assert info.value.message == "token signature invalid"


def test_token_cache_drops_expired_and_evicts_oldest_expiring() -> None:
    cache = InMemoryTokenCache(3)
    assert cache.check_and_add("a", 100.0, now=0.0)
    assert not cache.check_and_add("a", 100.0, now=1.0)
    assert cache.check_and_add("b", 50.0, now=1.0)
    assert cache.check_and_add("c", 200.0, now=1.0)
    assert cache.check_and_add("d", 150.0, now=2.0)  # full: "b" (expires first) evicted
    assert len(cache) == 3
    assert cache.check_and_add("b", 50.0, now=3.0)  # forgotten, so accepted again
    assert not cache.check_and_add("c", 200.0, now=3.0)
    assert cache.check_and_add("x", 500.0, now=160.0)  # a, d, b expired and dropped
    assert len(cache) == 2
    assert cache.check_and_add("a", 300.0, now=160.0)


def test_token_cache_thread_safe() -> None:
    cache = InMemoryTokenCache(10_000)
    accepted: list[bool] = []

    def work() -> None:
        for i in range(500):
            accepted.append(cache.check_and_add(f"j{i}", 1e12, now=0.0))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(accepted) == 500


def test_header_checks_never_need_the_body_and_a_wrong_body_does_not_use_the_token() -> None:
    v = JwtVerifier(KEY)
    token = hs256(claims(BODY))
    pending = v.check_headers(token, plane="memory")
    assert pending.claims.verb == "health"
    with pytest.raises(Unauthenticated, match="not minted for this body"):
        v.admit(pending, BODY + b" ")
    assert v.admit(v.check_headers(token, plane="memory"), BODY).actor == "agent-a"
    with pytest.raises(Unauthenticated, match="token replayed"):
        v.check_headers(token, plane="memory")  # seen: refused before any body is read


def test_a_shared_token_cache_makes_a_token_single_use_across_verifiers() -> None:
    shared = InMemoryTokenCache()
    first, second = JwtVerifier(KEY, token_cache=shared), JwtVerifier(KEY, token_cache=shared)
    token = hs256(claims(BODY))
    first.verify(token, body=BODY, plane="memory", verb="health")
    with pytest.raises(Unauthenticated, match="token replayed"):
        second.verify(token, body=BODY, plane="memory", verb="health")
    # Two requests with one token racing past the header check: only one is admitted.
    token = hs256(claims(BODY))
    a, b = first.check_headers(token, plane="memory"), second.check_headers(token, plane="memory")
    first.admit(a, BODY)
    with pytest.raises(Unauthenticated, match="token replayed"):
        second.admit(b, BODY)


def test_token_cache_must_have_both_methods() -> None:
    with pytest.raises(TypeError):
        JwtVerifier(KEY, token_cache=object())  # type: ignore[arg-type]


def test_in_memory_token_cache_seen_honours_expiry() -> None:
    cache = InMemoryTokenCache(10)
    assert not cache.seen("a", now=0.0)
    assert cache.check_and_add("a", 10.0, now=0.0)
    assert cache.seen("a", now=9.0)
    assert not cache.seen("a", now=10.0)


def test_previous_keys_are_accepted_and_only_listed_keys() -> None:
    old, new = b"old-key-0123456789abcdef-0123456789", b"new-key-0123456789abcdef-0123456789"
    rotating = JwtVerifier(new, previous_keys=[old])
    for key in (old, new):
        rotating.verify(hs256(claims(BODY), key), body=BODY, plane="memory", verb="health")
    with pytest.raises(Unauthenticated, match="signature invalid"):
        rotating.verify(hs256(claims(BODY), KEY), body=BODY, plane="memory", verb="health")
    with pytest.raises(Unauthenticated, match="signature invalid"):
        JwtVerifier(new).verify(hs256(claims(BODY), old), body=BODY, plane="memory", verb="health")
    with pytest.raises(ValueError, match="previous_keys"):
        JwtVerifier(new, previous_keys=[b""])
