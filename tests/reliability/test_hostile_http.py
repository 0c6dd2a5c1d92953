"""Hostile input over real HTTP, against one provider (all planes, file-backed) on
127.0.0.1: the JWT attack matrix, scope escapes, JSON edge cases, nasty ids and scope
values, the VMP bearer key. Every bad call must get its documented error and write
nothing; every odd-but-valid value must be stored and returned verbatim.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from bifrost.client import BifrostClient, mint_token
from bifrost.errors import BifrostError, Forbidden, InvalidArguments, RevisionMismatch
from ratatoskr.memory.testing import chunk, one_hot
from ratatoskr.provider.testing import ServerProcess
from ratatoskr.vmp import auth as vmp_auth

from ..conftest import KEY
from .hostile import DROP, NASTY, Tally, claims, envelope, error_of, sign
from .support import (
    MEMORY_DIM,
    VMP_KEY,
    affect_client,
    base,
    memory_client,
    provider_env,
    report,
    running,
    vmp_client,
)

MIB = 1024 * 1024
# HS384/HS512 under a 33-byte key are forgeries here, not advice.
pytestmark = pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")


@pytest.fixture(scope="module")
def tally() -> Iterator[Tally]:
    t = Tally()
    yield t
    report("hostile-http", t.figures())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("hostile")
    with running(root, provider_env(root)) as s:
        yield s


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def admin(server: ServerProcess) -> Iterator[BifrostClient]:
    """An unrestricted memory caller, to look at what is stored."""
    with memory_client(base(server, "memory"), actor="admin") as c:
        yield c


@pytest.fixture(scope="module")
def affect_admin(server: ServerProcess) -> Iterator[BifrostClient]:
    with affect_client(base(server, "affect"), actor="admin") as c:
        yield c


def url(server: ServerProcess, plane: str) -> str:
    return f"{server.base_url}/{plane}/bifrost/{plane}-call"


def post(
    http: httpx.Client,
    server: ServerProcess,
    body: Any,
    token: str | None,
    *,
    plane: str = "memory",
    route: str | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    hdrs = {"content-type": "application/json", **(headers or {})}
    if token is not None:
        hdrs["authorization"] = f"Bearer {token}"
    target = f"{server.base_url}/{plane}{route}" if route else url(server, plane)
    return http.post(target, content=body, headers=hdrs)


def emb(i: int = 0) -> list[float]:
    return one_hot(i, MEMORY_DIM, rest=0.25)


# -- the JWT matrix -------------------------------------------------------------------

Forge = Callable[[bytes], str]


def _hs(**over: Any) -> Forge:
    return lambda body: sign(claims(body, "upsert_many", **over))


def _now(delta: int) -> int:
    return int(time.time()) + delta


JWT_CASES: dict[str, Forge] = {
    "alg none": lambda b: sign(claims(b, "upsert_many"), alg="none"),
    "alg None": lambda b: sign(claims(b, "upsert_many"), alg="None"),
    "alg hs256 lowercase": lambda b: sign(claims(b, "upsert_many"), alg="hs256"),
    "alg HS384": lambda b: sign(claims(b, "upsert_many"), alg="HS384"),
    "alg HS512": lambda b: sign(claims(b, "upsert_many"), alg="HS512"),
    "alg RS256": lambda b: sign(claims(b, "upsert_many"), alg="RS256"),
    "alg ES256": lambda b: sign(claims(b, "upsert_many"), alg="ES256"),
    "alg PS256": lambda b: sign(claims(b, "upsert_many"), alg="PS256"),
    "alg EdDSA": lambda b: sign(claims(b, "upsert_many"), alg="EdDSA"),
    "header jwk injected": lambda b: sign(
        claims(b, "upsert_many"), alg="RS256", jwk={"kty": "oct", "k": "AAAA"}
    ),
    "wrong key": lambda b: sign(
        claims(b, "upsert_many"), key=b"not-the-heimdall-key-0123456789abcdef"
    ),
    "empty key": lambda b: sign(claims(b, "upsert_many"), alg="HS256", key=b""),
    "signature stripped": lambda b: sign(claims(b, "upsert_many")).rsplit(".", 1)[0] + ".",
    "signature of another token": lambda b: (
        sign(claims(b, "upsert_many")).rsplit(".", 1)[0]
        + "."
        + sign(claims(b, "search")).rsplit(".", 1)[1]
    ),
    "two segments": lambda b: ".".join(sign(claims(b, "upsert_many")).split(".")[:2]),
    "four segments": lambda b: sign(claims(b, "upsert_many")) + ".e30",
    "not base64": lambda b: "!!!.???.***",
    "payload not json": lambda b: sign(b"not json", alg="HS256x"),
    "aud other": _hs(aud="someone-else"),
    "aud missing": _hs(aud=DROP),
    "aud list without us": _hs(aud=["someone-else", "another"]),
    # A token minted for several consumers would be good at each: only our exact id passes.
    "aud list with us": _hs(aud=["other", "ratatoskr"]),
    "iss other": _hs(iss="loki"),
    "iss other case": _hs(iss="Heimdall"),
    "iss missing": _hs(iss=DROP),
    "sub missing": _hs(sub=DROP),
    "sub empty": _hs(sub=""),
    "sub not a string": _hs(sub=7),
    "jti missing": _hs(jti=DROP),
    "jti too long": _hs(jti="j" * 257),
    "jti not a string": _hs(jti=12345),
    "expired": lambda b: sign(claims(b, "upsert_many", iat=_now(-200), exp=_now(-100))),
    "iat in the future": lambda b: sign(claims(b, "upsert_many", iat=_now(120), exp=_now(180))),
    "nbf in the future": lambda b: sign(claims(b, "upsert_many", nbf=_now(120))),
    "nbf not a number": lambda b: sign(claims(b, "upsert_many", nbf="soon")),
    "lifetime 301 s": lambda b: sign(claims(b, "upsert_many", iat=_now(0), exp=_now(301))),
    "lifetime a day": lambda b: sign(claims(b, "upsert_many", iat=_now(0), exp=_now(86_400))),
    "lifetime zero": lambda b: sign(claims(b, "upsert_many", iat=_now(0), exp=_now(0))),
    "exp before iat": lambda b: sign(claims(b, "upsert_many", iat=_now(0), exp=_now(-1))),
    "exp missing": _hs(exp=DROP),
    "iat missing": _hs(iat=DROP),
    "exp a string": _hs(exp="9999999999"),
    "exp infinite": _hs(exp=1e308),
    "bifrost missing": _hs(bifrost=DROP),
    "bifrost not an object": lambda b: sign({**claims(b, "upsert_many"), "bifrost": "memory"}),
    "plane missing": _hs(inner={"plane": DROP}),
    "plane affect on memory": _hs(inner={"plane": "affect"}),
    "plane vmp on memory": _hs(inner={"plane": "vmp"}),
    "verb missing": _hs(inner={"verb": DROP}),
    "verb other (search)": _hs(inner={"verb": "search"}),
    "verb other (delete_many)": _hs(inner={"verb": "delete_many"}),
    "body hash missing": _hs(inner={"body_sha256": DROP}),
    "body hash of another body": _hs(inner={"body_sha256": hashlib.sha256(b"{}").hexdigest()}),
    "body hash not hex": _hs(inner={"body_sha256": "zz" * 32}),
    "body hash empty": _hs(inner={"body_sha256": ""}),
    "scope missing": _hs(inner={"scope": DROP}),
    "scope not an object": _hs(inner={"scope": ["tenant", "mallory"]}),
    "scope null": _hs(inner={"scope": None}),
    "scope value not a string": _hs(inner={"scope": {"tenant": 1}}),
    "scope value empty": _hs(inner={"scope": {"tenant": ""}}),
    "scope axis outside the lattice": _hs(inner={"scope": {"tenant": "mallory", "root": "1"}}),
}

AUTH_HEADER_CASES: dict[str, Callable[[str], dict[str, str]]] = {
    "no authorization": lambda tok: {},
    "basic scheme": lambda tok: {"authorization": f"Basic {tok}"},
    "bearer without token": lambda tok: {"authorization": "Bearer"},
    "bearer junk": lambda tok: {"authorization": "Bearer x y z"},
    "token in a cookie": lambda tok: {"cookie": f"token={tok}"},
    "token in another header": lambda tok: {"x-authorization": f"Bearer {tok}"},
    "the vmp key as bearer": lambda tok: {"authorization": f"Bearer {VMP_KEY}"},
}


def _upsert_body(ident: str) -> bytes:
    return envelope(
        "upsert_many",
        {"records": [chunk(ident, emb(), {"tenant": "mallory"})]},
        idempotency_key=ident,
    )


def _unauthenticated(response: httpx.Response, token: str | None) -> None:
    assert error_of(response) == (401, "bifrost.unauthenticated"), response.text
    if token:
        assert token not in response.text
        for part in token.split("."):
            assert len(part) < 8 or part not in response.text


def test_jwt_matrix_every_forgery_is_401_and_writes_nothing(
    server: ServerProcess, http: httpx.Client, admin: BifrostClient, tally: Tally
) -> None:
    ids: list[str] = []
    for name, forge in JWT_CASES.items():
        ident = f"jwt-{uuid.uuid4()}"
        ids.append(ident)
        body = _upsert_body(ident)
        token = forge(body)
        response = post(http, server, body, token)
        tally.add("jwt forgery", response)
        assert response.status_code == 401, (name, response.text)
        _unauthenticated(response, token)
    for name, headers in AUTH_HEADER_CASES.items():
        ident = f"jwt-{uuid.uuid4()}"
        ids.append(ident)
        body = _upsert_body(ident)
        good = sign(claims(body, "upsert_many"))
        response = post(http, server, body, None, headers=headers(good))
        tally.add("jwt forgery", response)
        assert response.status_code == 401, (name, response.text)
        _unauthenticated(response, good)
    assert admin.get_many(ids) == []
    # The harness itself is sound: the honest token for the same shape of call works.
    body = _upsert_body("jwt-control")
    ok = post(http, server, body, sign(claims(body, "upsert_many")))
    assert ok.status_code == 200, ok.text


def test_a_token_is_single_use_and_bound_to_body_verb_and_plane(
    server: ServerProcess, http: httpx.Client, admin: BifrostClient, tally: Tally
) -> None:
    body = _upsert_body("bind-1")
    token = sign(claims(body, "upsert_many"))
    assert post(http, server, body, token).status_code == 200
    replay = post(http, server, body, token)
    tally.add("jwt replay/binding", replay)
    _unauthenticated(replay, token)
    assert replay.json()["error"]["message"] == "token replayed"
    # A token whose first use failed is spent too.
    bad = envelope("upsert_many", {"records": "nope"}, idempotency_key="bind-2")
    token = sign(claims(bad, "upsert_many"))
    first = post(http, server, bad, token)
    assert error_of(first) == (400, "memory.invalid_arguments")
    again = post(http, server, bad, token)
    tally.add("jwt replay/binding", again)
    _unauthenticated(again, token)
    # Body binding: one byte more, another call_id, the same JSON re-serialised.
    body = _upsert_body("bind-3")
    for other in (
        body + b" ",
        body.replace(b'"hostile-', b'"hostilE-'),
        json.dumps(json.loads(body), indent=1).encode(),
    ):
        response = post(http, server, other, sign(claims(body, "upsert_many")))
        tally.add("jwt replay/binding", response)
        _unauthenticated(response, None)
    # Verb binding: a token for `get` does not carry an upsert.
    response = post(http, server, body, sign(claims(body, "get")))
    tally.add("jwt replay/binding", response)
    _unauthenticated(response, None)
    assert response.json()["error"]["message"] == "token minted for another verb"
    # Plane binding: memory's token on affect, affect's on memory, either on the
    # handshake route with another verb.
    aff = envelope("put_many", {"records": [{"key": "bind-4", "scope": {}}]}, idempotency_key="b4")
    for plane, payload, verb, claim_plane in (
        ("affect", aff, "put_many", "memory"),
        ("memory", body, "upsert_many", "affect"),
    ):
        response = post(
            http, server, payload, sign(claims(payload, verb, plane=claim_plane)), plane=plane
        )
        tally.add("jwt replay/binding", response)
        _unauthenticated(response, None)
    response = post(
        http, server, body, sign(claims(body, "upsert_many")), route="/bifrost/handshake"
    )
    tally.add("jwt replay/binding", response)
    assert error_of(response) == (400, "bifrost.unknown_verb")
    # A Bifrost token is no VMP key.
    response = http.get(
        f"{server.base_url}/vmp/health",
        headers={"authorization": f"Bearer {sign(claims(b'', 'health'))}"},
    )
    tally.add("jwt replay/binding", response)
    assert response.status_code == 401
    assert response.content == b""
    assert admin.get_many(["bind-3", "bind-4"]) == []


def test_clock_leeway_is_30_seconds(server: ServerProcess, http: httpx.Client) -> None:
    """Documented: 30 s of skew are tolerated on exp/iat/nbf, no more."""
    body = _upsert_body("leeway-ok")
    late = sign(claims(body, "upsert_many", iat=_now(-80), exp=_now(-20)))
    assert post(http, server, body, late).status_code == 200
    body = _upsert_body("leeway-late")
    later = sign(claims(body, "upsert_many", iat=_now(-100), exp=_now(-40)))
    _unauthenticated(post(http, server, body, later), later)


# -- scope escapes --------------------------------------------------------------------


@pytest.fixture(scope="module")
def tenants(server: ServerProcess) -> Iterator[dict[str, BifrostClient]]:
    """Alice (tenant A) and Bob (tenant B), each with data, on both Bifrost planes."""
    m = base(server, "memory")
    a = base(server, "affect")
    clients = {
        "alice": memory_client(m, scope={"tenant": "A"}, actor="alice"),
        "bob": memory_client(m, scope={"tenant": "B"}, actor="bob"),
        "alice-affect": affect_client(a, scope={"tenant": "A"}, actor="alice"),
        "bob-affect": affect_client(a, scope={"tenant": "B"}, actor="bob"),
        "bob-u1": memory_client(m, scope={"tenant": "B", "end_user": "u1"}, actor="bob"),
    }
    clients["bob"].upsert_many(
        [
            chunk("bob-1", emb(), {"tenant": "B", "end_user": "u1"}, content="bob's secret"),
            chunk("bob-2", emb(), {"tenant": "B", "end_user": "u2"}, content="bob's other secret"),
        ],
        idempotency_key="bob-seed",
    )
    clients["alice"].upsert_many(
        [chunk("alice-1", emb(), {"tenant": "A", "end_user": "u1"})], idempotency_key="alice-seed"
    )
    clients["bob-affect"].put_many(
        [{"key": "bob-k", "scope": {"tenant": "B"}, "mood": "secret"}], idempotency_key="bob-seed"
    )
    yield clients
    for c in clients.values():
        c.close()


def _forbidden(call: Callable[[], Any]) -> None:
    with pytest.raises(Forbidden) as info:
        call()
    assert info.value.status == 403


def test_scope_escapes_on_memory(
    tenants: dict[str, BifrostClient], admin: BifrostClient, tally: Tally
) -> None:
    alice = tenants["alice"]
    before = admin.get_many(["bob-1", "bob-2", "alice-1"])
    # Writes outside the grant: another tenant, no scope, overwriting bob's id.
    _forbidden(lambda: alice.upsert_many([chunk("a-x", emb(), {"tenant": "B"})]))
    _forbidden(lambda: alice.upsert_many([chunk("a-y", emb(), {})]))
    _forbidden(lambda: alice.upsert_many([chunk("bob-1", emb(), {"tenant": "A"})]))
    # With an expectation, bob's id reads as absent: the same 409 an absent id gets, so
    # the answer does not tell alice that the id exists elsewhere.
    with pytest.raises(RevisionMismatch, match="expected 7, actual 0"):
        alice.upsert_many([chunk("bob-1", emb(), {"tenant": "A"})], expected_revisions={"bob-1": 7})
    _forbidden(lambda: tenants["bob-u1"].upsert_many([chunk("u1-x", emb(), {"tenant": "B"})]))
    _forbidden(
        lambda: tenants["bob-u1"].upsert_many(
            [chunk("bob-2", emb(), {"tenant": "B", "end_user": "u1"})]
        )
    )
    # Reads and deletes of bob's ids: absent, never deleted, never counted.
    assert alice.get("bob-1") is None
    assert alice.get_many(["bob-1", "bob-2", "alice-1"]) == [
        {**chunk("alice-1", emb(), {"tenant": "A", "end_user": "u1"}), "revision": 1}
    ]
    assert alice.delete_many(["bob-1", "bob-2"]) == {"deleted": 0}
    assert tenants["bob-u1"].get("bob-2") is None
    assert tenants["bob-u1"].delete_many(["bob-2"]) == {"deleted": 0}
    # Searches: a contradicting scope_all is refused; scope_any members outside the
    # grant match nothing; whatever the filter, no row from outside the grant.
    _forbidden(lambda: alice.search(emb(), top_k=10, scope_all={"tenant": "B"}))
    filters: list[dict[str, Any]] = [
        {},
        {"scope_any": [{"tenant": "B"}]},
        {"scope_any": [{"tenant": "B"}, {"end_user": "u1"}]},
        {"scope_any": [{}]},
        {"scope_all": {"end_user": "u1"}},
        {"scope_all": {"tenant": "A"}, "scope_any": [{"tenant": "B", "end_user": "u2"}]},
    ]
    for kwargs in filters:
        hits = alice.search(emb(), top_k=10, **kwargs)
        assert all(h["chunk"]["scope"]["tenant"] == "A" for h in hits), kwargs
        assert "bob" not in json.dumps(hits)
    assert admin.get_many(["bob-1", "bob-2", "alice-1"]) == before
    assert admin.get_many(["a-x", "a-y", "u1-x"]) == []
    # Idempotency keys are per actor: alice reusing bob's key is a first call, not a
    # replay of bob's result (nor a conflict that would reveal bob used it).
    assert alice.upsert_many(
        [chunk("alice-2", emb(), {"tenant": "A"})], idempotency_key="bob-seed"
    ) == {
        "upserted": 1,
        "replayed": False,
    }
    tally.tried["scope escape"] += 19


def test_scope_escapes_on_affect(tenants: dict[str, BifrostClient], tally: Tally) -> None:
    alice = tenants["alice-affect"]
    _forbidden(lambda: alice.put_many([{"key": "x", "scope": {"tenant": "B"}}]))
    _forbidden(lambda: alice.put_many([{"key": "bob-k", "scope": {"tenant": "A"}}]))
    _forbidden(lambda: alice.list(scope_all={"tenant": "B"}))
    assert alice.get("bob-k") is None
    assert alice.get_many(["bob-k"]) == []
    assert alice.history("bob-k") == {"items": [], "next_before_revision": None}
    assert all(i["key"] != "bob-k" for i in alice.list(scope_any=[{"tenant": "B"}])["items"])
    assert all(i["key"] != "bob-k" for i in alice.list()["items"])
    assert alice.delete_many(["bob-k"]) == {"deleted": 0}
    assert tenants["bob-affect"].get("bob-k")["mood"] == "secret"
    tally.tried["scope escape"] += 9


# -- JSON edge cases ------------------------------------------------------------------


def _search_raw(vector_json: str) -> bytes:
    return (
        '{"wire_version":"0.6","call_id":"j","verb":"search","args":{"vector":'
        + vector_json
        + ',"top_k":1}}'
    ).encode()


def _upsert_raw(record_json: str, key: str) -> bytes:
    return (
        '{"wire_version":"0.6","call_id":"j","verb":"upsert_many","idempotency_key":"'
        + key
        + '","args":{"records":['
        + record_json
        + "]}}"
    ).encode()


PAD = ",".join(["0.5"] * (MEMORY_DIM - 1))
MALFORMED: dict[str, bytes] = {
    "NaN literal": _search_raw(f"[NaN,{PAD}]"),
    "Infinity literal": _search_raw(f"[Infinity,{PAD}]"),
    "-Infinity literal": _search_raw(f"[-Infinity,{PAD}]"),
    "1e400": _search_raw(f"[1e400,{PAD}]"),
    "-1e400": _search_raw(f"[-1e400,{PAD}]"),
    "5000-digit integer": _search_raw(f"[{'9' * 5000},{PAD}]"),
    "nested 65 deep": _search_raw("[" * 65 + "]" * 65),
    "nested 100k deep": _search_raw("[" * 100_000 + "]" * 100_000),
    "duplicate top-level key": b'{"wire_version":"0.6","call_id":"j","verb":"get","verb":"delete_many","args":{}}',
    "duplicate key in a record": _upsert_raw(
        '{"id":"dup-1","embedding":[1,0,0,0,0,0,0,1],"scope":{"tenant":"mallory"},'
        '"scope":{"tenant":"B"}}',
        "dup-1",
    ),
    "duplicate key in a scope": _upsert_raw(
        '{"id":"dup-2","embedding":[1,0,0,0,0,0,0,1],"scope":{"tenant":"mallory","tenant":"B"}}',
        "dup-2",
    ),
    "invalid UTF-8": b'{"wire_version":"0.6","call_id":"\xff\xfe","verb":"health"}',
    "overlong UTF-8": b'{"wire_version":"0.6","call_id":"\xc0\xaf","verb":"health"}',
    "lone surrogate escape": b'{"wire_version":"0.6","call_id":"\\ud800","verb":"health"}',
    "byte order mark": b'\xef\xbb\xbf{"wire_version":"0.6","call_id":"j","verb":"health"}',
    "empty body": b"",
    "array body": b"[]",
    "string body": b'"health"',
    "null body": b"null",
    "trailing garbage": b'{"wire_version":"0.6","call_id":"j","verb":"health"}xyz',
    "two documents": b'{"wire_version":"0.6","call_id":"j","verb":"health"}{}',
    "wire_version a number": b'{"wire_version":0.6,"call_id":"j","verb":"health"}',
    "unknown top-level key": b'{"wire_version":"0.6","call_id":"j","verb":"health","admin":true}',
    "args not an object": b'{"wire_version":"0.6","call_id":"j","verb":"health","args":[]}',
    "call_id too long": b'{"wire_version":"0.6","call_id":"' + b"c" * 257 + b'","verb":"health"}',
}
INVALID: dict[str, tuple[bytes, tuple[int, str]]] = {
    "huge vector (1M numbers)": (
        _search_raw("[" + ",".join(["1"] * 1_000_000) + "]"),
        (400, "memory.invalid_arguments"),
    ),
    "huge batch (100k records)": (
        _upsert_raw(",".join(["{}"] * 100_000), "huge"),
        (400, "bifrost.malformed_envelope"),  # over 100k JSON objects: refused unparsed
    ),
    "batch over max_batch (1001 records)": (
        _upsert_raw(",".join(["{}"] * 1001), "over"),
        (400, "memory.invalid_arguments"),
    ),
    "wire_version 0.7": (
        b'{"wire_version":"0.7","call_id":"j","verb":"health"}',
        (400, "bifrost.unsupported_wire_version"),
    ),
    "1e-400 (underflows to 0)": (
        _search_raw("[1e-400,0,0,0,0,0,0,0]"),
        (400, "memory.invalid_arguments"),
    ),
    "a bool for a number": (_search_raw(f"[true,{PAD}]"), (400, "memory.invalid_arguments")),
}


def _signed(body: bytes) -> str:
    try:
        verb = json.loads(body)["verb"]
    except Exception:
        verb = "health"
    return sign(claims(body, verb if isinstance(verb, str) else "health"))


def test_json_edge_cases_on_the_bifrost_planes(
    server: ServerProcess, http: httpx.Client, admin: BifrostClient, tally: Tally
) -> None:
    for name, body in MALFORMED.items():
        response = post(http, server, body, _signed(body))
        tally.add("json edge case", response)
        assert error_of(response) == (400, "bifrost.malformed_envelope"), (name, response.text)
    for name, (body, expected) in INVALID.items():
        response = post(http, server, body, _signed(body))
        tally.add("json edge case", response)
        assert error_of(response) == expected, (name, response.text)
    assert admin.get_many(["dup-1", "dup-2"]) == []


def test_body_limit_is_8_mib_exactly(
    server: ServerProcess, http: httpx.Client, admin: BifrostClient, tally: Tally
) -> None:
    limit = 8 * MIB
    shell = _upsert_raw(
        '{"id":"big-1","embedding":[1,0,0,0,0,0,0,1],"scope":{"tenant":"mallory"},"pad":"@"}',
        "big-1",
    )
    exact = shell.replace(b'"@"', b'"' + b"p" * (limit - len(shell) + 1) + b'"')
    assert len(exact) == limit
    ok = post(http, server, exact, _signed(exact))
    assert ok.status_code == 200, ok.text[:200]
    assert len(admin.get("big-1")["pad"]) == limit - len(shell) + 1
    over = exact.replace(b'"big-1"', b'"big-2"', 1) + b" "
    assert len(over) == limit + 1
    for name, response in (
        ("with Content-Length", post(http, server, over, _signed(over))),
        ("chunked", post(http, server, iter([over[:MIB], over[MIB:]]), _signed(over))),
    ):
        tally.add("json edge case", response)
        assert error_of(response) == (413, "bifrost.payload_too_large"), name
    # Without a token the body is never read: 401 however large it is.
    response = post(http, server, over, None)
    tally.add("json edge case", response)
    assert error_of(response) == (401, "bifrost.unauthenticated")
    assert admin.get("big-2") is None


def test_json_edge_cases_on_vmp(server: ServerProcess, http: httpx.Client, tally: Tally) -> None:
    with vmp_client(base(server, "vmp")) as vmp:
        records, state = vmp.health()["records"], vmp.state_hash()
    route = f"{server.base_url}/vmp/v1/memory/upsert_vector"
    auth = {"authorization": f"Bearer {VMP_KEY}", "content-type": "application/json"}
    bodies = {
        "NaN": b'{"vector":[NaN,1,2,3]}',
        "Infinity": b'{"vector":[Infinity,1,2,3]}',
        "1e400": b'{"vector":[1e400,1,2,3]}',
        "deep": b'{"vector":[1,2,3,4],"metadata":' + b"[" * 10_000 + b"]" * 10_000 + b"}",
        "duplicate key": b'{"vector":[1,2,3,4],"vector":[5,6,7,8]}',
        "invalid UTF-8": b'{"vector":[1,2,3,4],"metadata":"\xff"}',
        "lone surrogate": b'{"vector":[1,2,3,4],"metadata":"\\udc00"}',
        "huge vector": b'{"vector":[' + b",".join([b"1"] * 1_000_000) + b"]}",
        "empty": b"",
        "array": b"[]",
        "unknown field": b'{"vector":[1,2,3,4],"admin":true}',
        "8 MiB + 1": b'{"vector":[1,2,3,4],"metadata":"' + b"m" * (8 * MIB) + b'"}',
    }
    for name, body in bodies.items():
        response = http.post(route, content=body, headers=auth)
        tally.add("json edge case (vmp)", response)
        expected = "DIM_MISMATCH" if name == "huge vector" else "INVALID_ARGUMENT"
        assert (response.status_code, response.json()["code"]) == (400, expected), name
    with vmp_client(base(server, "vmp")) as vmp:
        assert (vmp.health()["records"], vmp.state_hash()) == (records, state)


@pytest.mark.parametrize("plane", ["memory", "affect"])
def test_integer_beyond_double_range_in_an_opaque_field_round_trips(
    server: ServerProcess, admin: BifrostClient, affect_admin: BifrostClient, plane: str
) -> None:
    """The envelope parser accepts integer literals of up to 4300 digits (bifrost README)
    and records are opaque and verbatim, numbers exactly (memory-plane.md): 10**400 in a
    field of the record must come back as 10**400 — or, at the least, be refused with a
    documented 4xx and nothing written (it was a 500 until bifrost's codec fell back to
    the standard library for integers orjson cannot read)."""
    big = 10**400
    client = admin if plane == "memory" else affect_admin
    record: dict[str, Any] = {"scope": {}, "count": big}
    record.update(
        {"id": "big-int", "embedding": emb()} if plane == "memory" else {"key": "big-int"}
    )
    verb = "upsert_many" if plane == "memory" else "put_many"
    status = 200
    try:
        client.call(verb, {"records": [record]}, idempotency_key="big-int")
    except BifrostError as exc:
        status = exc.status
    assert status < 500
    stored = client.get("big-int")
    assert stored is None if status != 200 else stored["count"] == big


# -- nasty ids and scope values, verbatim ------------------------------------------------


def test_nasty_ids_and_scope_values_are_stored_and_returned_verbatim(
    server: ServerProcess, admin: BifrostClient, affect_admin: BifrostClient, tally: Tally
) -> None:
    m, a = base(server, "memory"), base(server, "affect")
    for i, text in enumerate(NASTY):
        grant = {"tenant": text}
        scope = {"tenant": text, "end_user": text, "group": f"g{i}"}
        record = {"id": text, "embedding": emb(i), "scope": scope, "content": text, "i": i}
        with memory_client(m, scope=grant, actor=text) as mem:
            assert mem.upsert_many([record], idempotency_key=text) == {
                "upserted": 1,
                "replayed": False,
            }
            assert mem.get(text) == {**record, "revision": 1}
            assert mem.get_many([text, text]) == [{**record, "revision": 1}]
            hits = mem.search(emb(i), top_k=50, scope_all={"end_user": text})
            assert [h["chunk_id"] for h in hits] == [text]
            assert hits[0]["chunk"] == record
            # The same id again is a replay under the same key, verbatim.
            assert mem.upsert_many([record], idempotency_key=text)["replayed"] is True
        with affect_client(a, scope=grant, actor=text) as aff:
            state = {"key": text, "scope": scope, "note": text}
            assert aff.put_many([state], idempotency_key=text)["written"] == 1
            got = aff.get(text)
            assert {k: v for k, v in got.items() if k not in ("revision", "recorded_at")} == state
            assert [x["key"] for x in aff.list(scope_all={"end_user": text})["items"]] == [text]
            assert [x["key"] for x in aff.history(text)["items"]] == [text]
        tally.tried["nasty id/scope value"] += 1
    # Values differing only past a NUL, or by normalisation, stay distinct.
    assert len({r["id"] for r in admin.get_many(NASTY)}) == len(NASTY)
    with memory_client(m, scope={"tenant": "a"}) as prefix:
        assert prefix.get("a\x00b") is None  # the grant "a" is not "a\x00b"
        assert prefix.search(emb(7), top_k=50) == []
    listing = affect_admin.list(limit=500)["items"]
    keys = [x["key"] for x in listing if x["key"] in NASTY]
    assert keys == sorted(NASTY)  # code point order, NULs and astral planes included
    # Too long by one byte is refused, not truncated.
    with memory_client(m) as mem, pytest.raises(InvalidArguments) as info:
        mem.upsert_many([{"id": "é" * 256 + "x", "embedding": emb(), "scope": {}}])
    assert info.value.status == 400


def test_nasty_values_round_trip_through_vmp(server: ServerProcess, http: httpx.Client) -> None:
    with vmp_client(base(server, "vmp")) as vmp:
        for text in NASTY:
            out = vmp.upsert_vector([1.0, 2.0, 3.0, 4.0], tags=[text], metadata={text: [text]})
            assert vmp.get_metadata(out["memory_id"]) == {text: [text]}
    auth = {"authorization": f"Bearer {VMP_KEY}"}
    for text in NASTY:
        response = http.get(
            f"{server.base_url}/vmp/v1/memory/meta/get", params={"target_id": text}, headers=auth
        )
        assert response.status_code == 200
        assert response.json() == {"target_id": text, "metadata": None}


# -- the VMP bearer key ---------------------------------------------------------------


def test_vmp_key_is_compared_in_constant_time() -> None:
    source = inspect.getsource(vmp_auth.BearerAuth._authorized)
    assert "hmac.compare_digest(" in source
    assert "self._key" in source.split("hmac.compare_digest(")[1]
    assert "== self._key" not in source and "self._key ==" not in source


def test_vmp_bearer_key_matrix(server: ServerProcess, http: httpx.Client, tally: Tally) -> None:
    health = f"{server.base_url}/vmp/health"
    refused: dict[str, list[tuple[str, str]]] = {
        "missing": [],
        "wrong": [("authorization", "Bearer not-the-key")],
        "prefix": [("authorization", f"Bearer {VMP_KEY[:-1]}")],
        "suffix": [("authorization", f"Bearer {VMP_KEY}x")],
        "empty": [("authorization", "Bearer")],
        "basic": [("authorization", f"Basic {VMP_KEY}")],
        "bare key": [("authorization", VMP_KEY)],
        "two headers": [("authorization", f"Bearer {VMP_KEY}")] * 2,
        "a Bifrost token": [
            (
                "authorization",
                f"Bearer {mint_token(KEY.encode(), plane='memory', verb='health', body=b'', actor='x')}",
            )
        ],
        "non-ASCII": [("authorization", "Bearer ключ")],
    }
    for name, headers in refused.items():
        response = http.get(health, headers=[(k.encode(), v.encode()) for k, v in headers])
        tally.add("vmp bearer key", response)
        assert response.status_code == 401, name
        assert response.content == b""
        assert response.headers["www-authenticate"] == "Bearer"
    response = http.get(health, params={"api_key": VMP_KEY})
    tally.add("vmp bearer key", response)
    assert response.status_code == 401
    for header in (f"bearer {VMP_KEY}", f"Bearer  {VMP_KEY}"):
        assert http.get(health, headers={"authorization": header}).status_code == 200


def test_server_still_serves_after_all_that(server: ServerProcess) -> None:
    """The provider is alive and answering after the hostile traffic above."""
    with memory_client(base(server, "memory")) as mem:
        assert mem.health()["status"] == "ok"
    assert server.proc.poll() is None
