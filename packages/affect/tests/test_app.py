"""The affect provider app: this store behind bifrost's affect app, over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from bifrost.client import BifrostClient, build_envelope, mint_token
from bifrost.errors import Forbidden, InvalidArguments, RevisionMismatch, Unauthenticated
from ratatoskr.affect import RatatoskrAffectStore, build_affect_provider_app, open_affect_store
from ratatoskr.affect import app as affect_app

KEY = b"heimdall-shared-secret-for-tests"
WRONG_KEY = b"some-other-issuers-secret-key-32b"


@pytest.fixture
def store(db_file: str) -> Iterator[RatatoskrAffectStore]:
    s = open_affect_store(db_file)
    yield s
    s.close()


@pytest.fixture
def http(store: RatatoskrAffectStore) -> Iterator[TestClient]:
    with TestClient(build_affect_provider_app(store, KEY)) as c:
        yield c


def client(
    http: TestClient, *, actor: str = "worldtree", scope: dict[str, str] | None = None
) -> BifrostClient:
    return BifrostClient("", KEY, actor=actor, scope=scope, plane="affect", http_client=http)


def test_one_builder_one_name() -> None:
    # The seed contract's name is the only one (the *_plane_app alias went).
    assert affect_app.__all__ == ["build_affect_provider_app"]
    assert build_affect_provider_app is affect_app.build_affect_provider_app


def test_key_is_required(store: RatatoskrAffectStore) -> None:
    with pytest.raises(ValueError, match="non-empty"):
        build_affect_provider_app(store, b"")
    with pytest.raises(TypeError):
        build_affect_provider_app(store, "text-key")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        build_affect_provider_app(object(), KEY)  # type: ignore[arg-type]


def test_handshake_advertises_the_affect_plane(http: TestClient) -> None:
    hs = client(http).handshake({"name": "worldtree", "version": "1"})
    assert hs["plane"] == "affect" and hs["consumer_id"] == "ratatoskr"
    assert hs["capabilities"]["history_supported"] is True
    assert set(hs["verbs"]) >= {"put_many", "get", "history", "list", "delete_many"}


def test_verbs_round_trip_over_http(http: TestClient) -> None:
    c = client(http)
    rec: dict[str, Any] = {"key": "agent/subject", "scope": {"tenant": "t1"}, "valence": -0.5}
    assert c.put_many([rec], idempotency_key="p1") == {"written": 1, "replayed": False}
    assert c.put_many([rec], idempotency_key="p1") == {"written": 1, "replayed": True}
    c.put_many([{**rec, "valence": 0.5}], idempotency_key="p2", expected_revisions={rec["key"]: 1})
    got = c.get(rec["key"])
    assert got["revision"] == 2 and got["valence"] == 0.5
    hist = c.history(rec["key"], limit=1)
    assert [r["revision"] for r in hist["items"]] == [2] and hist["next_before_revision"] == 2
    assert c.list(scope_all={"tenant": "t1"})["items"] == [got]
    with pytest.raises(RevisionMismatch) as err:
        c.put_many([rec], idempotency_key="p3", expected_revisions={rec["key"]: 1})
    assert err.value.wire_code() == "affect.revision_mismatch"
    with pytest.raises(InvalidArguments) as bad:
        c.put_many([{**rec, "revision": 9}], idempotency_key="p4")
    assert bad.value.wire_code() == "affect.invalid_arguments"
    assert c.delete_many([rec["key"]]) == {"deleted": 1}
    assert c.history(rec["key"]) == {"items": [], "next_before_revision": None}


def test_the_grant_limits_reads_and_writes(http: TestClient) -> None:
    client(http).put_many(
        [
            {"key": "mine", "scope": {"tenant": "t1"}},
            {"key": "theirs", "scope": {"tenant": "t2"}},
        ],
        idempotency_key="seed",
    )
    c = client(http, scope={"tenant": "t1"})
    assert c.get("theirs") is None
    assert [r["key"] for r in c.list()["items"]] == ["mine"]
    with pytest.raises(Forbidden):
        c.put_many([{"key": "x", "scope": {"tenant": "t2"}}], idempotency_key="w")
    assert c.delete_many(["theirs"]) == {"deleted": 0}


def test_a_token_from_another_key_is_refused(http: TestClient, store: RatatoskrAffectStore) -> None:
    before = store.dump()
    body = build_envelope("put_many", {"records": [{"key": "k", "scope": {}}]}, idempotency_key="i")
    token = mint_token(WRONG_KEY, plane="affect", verb="put_many", body=body, actor="a")
    resp = http.post(
        "/bifrost/affect-call", content=body, headers={"authorization": f"Bearer {token}"}
    )
    assert resp.status_code == 401
    assert resp.json()["error"]["code"] == "bifrost.unauthenticated"
    assert store.dump() == before
    with pytest.raises(Unauthenticated):
        BifrostClient("", WRONG_KEY, actor="a", plane="affect", http_client=http).get("k")


def test_app_shutdown_leaves_the_store_open(store: RatatoskrAffectStore) -> None:
    with TestClient(build_affect_provider_app(store, KEY, consumer_id="other")) as http:
        hs = BifrostClient(
            "", KEY, actor="a", plane="affect", http_client=http, audience="other"
        ).handshake()
        assert hs["consumer_id"] == "other"
    assert store.health()["status"] == "ok"
