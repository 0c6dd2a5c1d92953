"""The Worldtree-side client (sync and async) against the apps over ASGI."""

from __future__ import annotations

import uuid

import anyio
import httpx
import jwt
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from bifrost.client import (
    AsyncBifrostClient,
    BifrostClient,
    WrongBaseURL,
    build_envelope,
    mint_token,
)
from bifrost.consumer import ConsumerRegistration, build_affect_app, build_memory_app
from bifrost.consumer.testing import InMemoryAffectStore, InMemoryMemoryStore
from bifrost.consumer.testing.support import DIM, KEY, chunk
from bifrost.errors import (
    BifrostError,
    Forbidden,
    IdempotencyConflict,
    Internal,
    InvalidArguments,
    InvalidFilter,
    RevisionMismatch,
    Unauthenticated,
    UnknownVerb,
    UnsupportedVerb,
)
from bifrost.reference_server import JwtVerifier

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_mint_token_claims() -> None:
    body = build_envelope("get", {"chunk_id": "x"}, call_id="c1")
    token = mint_token(
        KEY,
        plane="memory",
        verb="get",
        body=body,
        actor="me",
        scope={"tenant": "t"},
        now=1000.0,
        lifetime_s=60,
        jti="j",
    )
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["iss"] == "heimdall"
    assert claims["aud"] == "ratatoskr"
    assert (claims["sub"], claims["iat"], claims["exp"], claims["jti"]) == ("me", 1000, 1060, "j")
    assert claims["bifrost"]["scope"] == {"tenant": "t"}
    assert jwt.get_unverified_header(token)["alg"] == "HS256"


def test_sync_client_memory() -> None:
    store = InMemoryMemoryStore(DIM)
    app = build_memory_app(store, JwtVerifier(KEY), ConsumerRegistration())
    with (
        TestClient(app) as tc,
        BifrostClient(
            "http://testserver",
            KEY,
            actor="wt",
            plane="memory",
            http_client=tc,
            scope={"tenant": "t"},
        ) as c,
    ):
        hs = c.handshake({"name": "worldtree", "version": "0.35"})
        assert hs["capabilities"] == c.describe_store()
        assert c.health()["embedding_dim"] == DIM
        recs = [chunk("a", 0, {"tenant": "t"}), chunk("b", 1, {"tenant": "t"})]
        assert c.upsert_many(recs, idempotency_key="k") == {"upserted": 2, "replayed": False}
        assert c.upsert_many(recs, idempotency_key="k")["replayed"] is True
        rows = c.search(recs[0]["embedding"], top_k=1, include={"embedding": False})
        assert rows[0]["chunk_id"] == "a"
        assert "embedding" not in rows[0]["chunk"]
        assert c.get("a")["revision"] == 1
        assert [r["id"] for r in c.get_many(["b", "a"])] == ["b", "a"]
        with pytest.raises(IdempotencyConflict) as conflict:
            c.upsert_many(recs[:1], idempotency_key="k")
        assert conflict.value.wire_code() == "memory.idempotency_conflict"
        assert conflict.value.status == 409
        with pytest.raises(RevisionMismatch) as mismatch:
            c.upsert_many(recs[:1], expected_revisions={"a": 5})
        assert (mismatch.value.id, mismatch.value.expected, mismatch.value.actual) == ("a", 5, 1)
        assert mismatch.value.details == {"id": "a", "expected": 5, "actual": 1}
        with pytest.raises(InvalidArguments):
            c.search([1.0], top_k=1)
        with pytest.raises(InvalidFilter):
            c.search(recs[0]["embedding"], top_k=1, scope_all={"planet": "p"})
        with pytest.raises(Forbidden):
            c.search(recs[0]["embedding"], top_k=1, scope_all={"tenant": "u"})
        with pytest.raises(UnsupportedVerb):
            c.call("mark_invalid")
        with pytest.raises(UnknownVerb) as unknown:
            c.call("frobnicate")
        assert unknown.value.wire_code() == "bifrost.unknown_verb"
        assert c.delete_many(["a", "zzz"]) == {"deleted": 1}


def test_wrong_key_raises_unauthenticated() -> None:
    app = build_memory_app(InMemoryMemoryStore(DIM), JwtVerifier(KEY), ConsumerRegistration())
    with TestClient(app) as tc:
        c = BifrostClient(
            "http://testserver", b"x" * 40, actor="wt", plane="memory", http_client=tc
        )
        with pytest.raises(Unauthenticated) as info:
            c.health()
        assert info.value.status == 401


def test_async_client_affect_over_asgi_transport() -> None:
    store = InMemoryAffectStore()
    app = build_affect_app(store, JwtVerifier(KEY), ConsumerRegistration())

    async def main() -> None:
        transport = httpx.ASGITransport(app=app)
        async with AsyncBifrostClient(
            "http://bifrost", KEY, actor="wt", plane="affect", transport=transport
        ) as c:
            assert (await c.handshake())["plane"] == "affect"
            assert (await c.health())["plane"] == "affect"
            assert (await c.describe_store())["history_supported"] is True
            for v in range(3):
                out = await c.put_many([{"key": "s", "scope": {}, "v": v}])
                assert out == {"written": 1, "replayed": False}
            assert (await c.get("s"))["revision"] == 3
            assert [r["key"] for r in await c.get_many(["s", "nope"])] == ["s"]
            page = await c.history("s", limit=2)
            assert [r["revision"] for r in page["items"]] == [3, 2]
            assert page["next_before_revision"] == 2
            assert [r["key"] for r in (await c.list(limit=5))["items"]] == ["s"]
            with pytest.raises(RevisionMismatch):
                await c.put_many([{"key": "s", "scope": {}}], expected_revisions={"s": 0})
            with pytest.raises(InvalidArguments) as info:
                await c.history("s", limit=0)
            assert info.value.wire_code() == "affect.invalid_arguments"
            assert await c.delete_many(["s"]) == {"deleted": 1}

    anyio.run(main)


def test_async_client_memory_search() -> None:
    store = InMemoryMemoryStore(DIM)
    app = build_memory_app(store, JwtVerifier(KEY), ConsumerRegistration())

    async def main() -> None:
        async with AsyncBifrostClient(
            "http://bifrost",
            KEY,
            actor="wt",
            plane="memory",
            transport=httpx.ASGITransport(app=app),
        ) as c:
            await c.upsert_many([chunk("a", 0), chunk("b", 1)], idempotency_key="k")
            rows = await c.search(chunk("q", 1)["embedding"], top_k=2)
            assert [r["chunk_id"] for r in rows] == ["b", "a"]
            assert (await c.get("a"))["id"] == "a"
            assert await c.get("zz") is None

    anyio.run(main)


def test_non_wire_responses_become_errors() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("handshake"):
            return httpx.Response(502, text="bad gateway")
        return httpx.Response(
            418,
            json={
                "ok": False,
                "call_id": None,
                "error": {"code": "teapot.brewing", "message": "m", "details": {}},
            },
        )

    c = BifrostClient(
        "http://x", KEY, actor="a", plane="memory", transport=httpx.MockTransport(handler)
    )
    with pytest.raises(Internal) as info:
        c.handshake()
    assert info.value.status == 502
    with pytest.raises(BifrostError) as other:
        c.health()
    assert other.value.wire_code() == "teapot.brewing"
    assert other.value.status == 418
    c.close()


def test_client_validates_plane() -> None:
    with pytest.raises(ValueError, match="plane"):
        BifrostClient("http://x", KEY, actor="a", plane="vmp")


def test_wrong_base_url_is_named_not_internal() -> None:
    """A combined server mounts planes at /memory and /affect; a base URL without the
    mount gets a plain 404, which the client names instead of calling it internal."""
    memory = build_memory_app(InMemoryMemoryStore(DIM), JwtVerifier(KEY), ConsumerRegistration())
    combined = Starlette(routes=[Mount("/memory", app=memory)])
    with TestClient(combined) as tc:
        right = BifrostClient(
            "http://testserver/memory", KEY, actor="a", plane="memory", http_client=tc
        )
        assert right.health()["plane"] == "memory"
        wrong = BifrostClient("http://testserver", KEY, actor="a", plane="memory", http_client=tc)
        with pytest.raises(WrongBaseURL) as info:
            wrong.health()
    err = info.value
    assert isinstance(err, BifrostError) and not isinstance(err, Internal)
    assert err.status == 404
    assert "/bifrost/memory-call" in str(err) and "base URL" in str(err)
    assert "/memory" in str(err)
    assert "Bearer" not in str(err) and "eyJ" not in str(err)


def test_wrong_base_url_async() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, text="Not Found")

    async def main() -> None:
        async with AsyncBifrostClient(
            "http://x/memroy",
            KEY,
            actor="a",
            plane="memory",
            transport=httpx.MockTransport(handler),
        ) as c:
            with pytest.raises(WrongBaseURL, match="/memroy/bifrost/memory-call"):
                await c.health()

    anyio.run(main)


def test_wire_404_body_is_kept() -> None:
    """A 404 that carries a wire error body is that error, not a wrong URL."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            404,
            json={
                "ok": False,
                "call_id": None,
                "error": {"code": "memory.forbidden", "message": "m", "details": {}},
            },
        )

    c = BifrostClient(
        "http://x", KEY, actor="a", plane="memory", transport=httpx.MockTransport(handler)
    )
    with pytest.raises(Forbidden):
        c.health()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_raise_invalid_arguments_unsent(bad: float) -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(500)

    c = BifrostClient(
        "http://x", KEY, actor="a", plane="memory", transport=httpx.MockTransport(handler)
    )
    record = chunk("secret-id", 0, {"tenant": "secret-tenant"}, content="secret content")
    record["embedding"][3] = bad
    with pytest.raises(InvalidArguments) as info:
        c.upsert_many([record])
    assert "args.records" in str(info.value) and "NaN or infinity" in str(info.value)
    assert "secret" not in str(info.value) and "secret" not in repr(info.value.details)
    with pytest.raises(InvalidArguments, match=r"search: args\.vector"):
        c.search([bad] * DIM, top_k=1)
    with pytest.raises(InvalidArguments, match="NaN or infinity"):
        build_envelope("search", {"vector": [bad]})
    with pytest.raises(InvalidArguments, match="not JSON data"):
        c.search([object()], top_k=1)  # type: ignore[list-item]
    assert sent == []
    c.close()


def _recording_client(sent: list[httpx.Request], **kwargs: object) -> BifrostClient:
    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(500)

    options: dict[str, object] = {"actor": "a", "plane": "memory", **kwargs}
    return BifrostClient(
        "http://x",
        KEY,
        transport=httpx.MockTransport(handler),
        **options,  # type: ignore[arg-type]
    )


def test_missing_actor_or_plane_names_the_public_class() -> None:
    with pytest.raises(TypeError, match=r"^BifrostClient\(\) missing .*'actor'"):
        BifrostClient("http://x", KEY, plane="memory")
    with pytest.raises(TypeError, match=r"^AsyncBifrostClient\(\) missing .*'plane'"):
        AsyncBifrostClient("http://x", KEY, actor="a")


def test_plane_contradicting_the_base_url_is_named() -> None:
    with pytest.raises(ValueError, match=r"plane='affect', but the base URL ends in /memory"):
        BifrostClient("http://x/memory", KEY, actor="a", plane="affect")
    with pytest.raises(ValueError, match="pass plane='affect'"):
        AsyncBifrostClient("http://x/affect/", KEY, actor="a", plane="memory")


def test_grant_with_an_unknown_axis_is_refused_before_sending() -> None:
    sent: list[httpx.Request] = []
    with pytest.raises(InvalidArguments) as info:
        _recording_client(sent, scope={"tennant": "secret-tenant"})
    message = str(info.value)
    assert "scope has an axis outside the scope lattice: 'tennant'" in message
    assert "end_user, group, tenant, agent_self" in message and "'tenant'?" in message
    assert "secret" not in message
    with pytest.raises(InvalidArguments, match="non-empty strings"):
        _recording_client(sent, scope={"tenant": ""})
    assert sent == []


def test_filter_with_an_unknown_axis_is_refused_before_sending() -> None:
    sent: list[httpx.Request] = []
    c = _recording_client(sent)
    with pytest.raises(InvalidFilter, match=r"scope_all has an axis .*'tennant'"):
        c.search([0.0] * DIM, top_k=1, scope_all={"tennant": "t"})
    with pytest.raises(InvalidFilter, match=r"scope_any\[1\] has an axis"):
        c.search([0.0] * DIM, top_k=1, scope_any=[{"tenant": "t"}, {"grup": "g"}])
    assert sent == []


def test_key_with_a_trailing_newline_gets_a_hint() -> None:
    """Decision: the client does not strip the key (an HS256 key may be any bytes); a
    signature refused while the key ends in whitespace says so."""
    store = InMemoryMemoryStore(DIM)
    app = build_memory_app(store, JwtVerifier(KEY), ConsumerRegistration())
    with TestClient(app) as tc:
        with pytest.raises(Unauthenticated, match=r"signature invalid \(the key .* newline"):
            BifrostClient(
                "http://t", KEY + b"\n", actor="a", plane="memory", http_client=tc
            ).health()
        with pytest.raises(Unauthenticated) as info:
            BifrostClient(
                "http://t", KEY + b"x", actor="a", plane="memory", http_client=tc
            ).health()
        assert str(info.value) == "token signature invalid"


def test_records_without_id_get_unguessable_ids_written_back() -> None:
    """Issue 22: a chunk id is one namespace across tenants; the client makes one."""
    store = InMemoryMemoryStore(DIM)
    app = build_memory_app(store, JwtVerifier(KEY), ConsumerRegistration())
    with TestClient(app) as tc:
        c = BifrostClient("http://t", KEY, actor="a", plane="memory", http_client=tc)
        given = chunk("mine", 0)
        fresh = [chunk("x", 1), chunk("x", 2)]
        for rec in fresh:
            del rec["id"]
        assert c.upsert_many([given, *fresh], idempotency_key="k")["upserted"] == 3
        ids = [rec["id"] for rec in fresh]
        assert given["id"] == "mine" and len(set(ids)) == 2
        assert all(uuid.UUID(i).version == 4 for i in ids)
        assert [r["id"] for r in c.get_many(ids)] == ids
        # A retry with the same dicts carries the same ids: replayed, nothing new.
        assert c.upsert_many([given, *fresh], idempotency_key="k")["replayed"] is True
        assert len(c.get_many(["mine", *ids])) == 3


def test_async_records_without_id_get_ids() -> None:
    store = InMemoryMemoryStore(DIM)
    app = build_memory_app(store, JwtVerifier(KEY), ConsumerRegistration())
    record = chunk("x", 0)
    del record["id"]

    async def main() -> None:
        async with AsyncBifrostClient(
            "http://t", KEY, actor="a", plane="memory", transport=httpx.ASGITransport(app=app)
        ) as c:
            await c.upsert_many([record])

    anyio.run(main)
    assert uuid.UUID(record["id"]).version == 4
    assert store.get(record["id"]) is not None
