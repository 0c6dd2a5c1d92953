"""The combined app: planes on their own files, tokens bound to their plane, each
plane standalone answering like the combined app, lifespans and /healthz."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from bifrost.client import BifrostClient, build_envelope, mint_token
from bifrost.httpclient import HttpResponse, SyncHttpClient
from ratatoskr.provider.app import build_provider_app
from ratatoskr.provider.settings import Plane, Settings
from ratatoskr.sqlite import connect

from .conftest import KEY


def chunk(cid: str, x: float) -> dict[str, Any]:
    return {"id": cid, "embedding": [x, 1.0, 0, 0, 0, 0, 0, 0], "scope": {"tenant": "t"}}


def affect(key: str, mood: str) -> dict[str, Any]:
    return {"key": key, "scope": {"tenant": "t"}, "mood": mood}


@pytest.fixture
def combined(settings: Settings) -> Iterator[TestClient]:
    with TestClient(build_provider_app(settings)) as client:
        yield client


def client_for(http: SyncHttpClient, plane: str, prefix: str = "") -> BifrostClient:
    return BifrostClient(
        f"http://testserver{prefix}",
        KEY.encode(),
        actor="agent",
        scope={"tenant": "t"},
        plane=plane,
        http_client=http,
    )


def rows(path: str, sql: str) -> list[tuple[Any, ...]]:
    conn = connect(path)
    try:
        return [tuple(r) for r in conn.execute(sql)]
    finally:
        conn.close()


def test_healthz_has_no_data(combined: TestClient) -> None:
    r = combined.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


def test_writes_land_in_their_own_files(combined: TestClient, settings: Settings) -> None:
    memory = BifrostClient(
        "http://testserver/memory", KEY.encode(), actor="a", plane="memory", http_client=combined
    )
    aff = BifrostClient(
        "http://testserver/affect", KEY.encode(), actor="a", plane="affect", http_client=combined
    )
    memory.upsert_many([chunk("c1", 1.0)], idempotency_key="m1")
    aff.put_many([affect("k1", "calm")], idempotency_key="a1")
    assert rows(settings.memory_db, "SELECT chunk_id FROM memory_chunks") == [("c1",)]
    assert rows(
        settings.affect_db, "SELECT count(*) FROM ratatoskr_schema WHERE plane='memory'"
    ) == [(0,)]
    assert rows(
        settings.memory_db, "SELECT count(*) FROM ratatoskr_schema WHERE plane='affect'"
    ) == [(0,)]
    assert aff.get("k1")["mood"] == "calm"


def post_with_token(http: TestClient, path: str, token_plane: str, verb: str) -> HttpResponse:
    body = build_envelope(verb, {})
    token = mint_token(KEY.encode(), plane=token_plane, verb=verb, body=body, actor="a")
    return http.post(
        path,
        content=body,
        headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
    )


def test_tokens_are_bound_to_their_plane(combined: TestClient) -> None:
    assert (
        post_with_token(combined, "/memory/bifrost/memory-call", "memory", "health").status_code
        == 200
    )
    assert (
        post_with_token(combined, "/affect/bifrost/affect-call", "affect", "health").status_code
        == 200
    )
    wrong = post_with_token(combined, "/affect/bifrost/affect-call", "memory", "health")
    assert wrong.status_code == 401
    assert wrong.json()["error"]["code"] == "bifrost.unauthenticated"
    assert (
        post_with_token(combined, "/memory/bifrost/memory-call", "affect", "health").status_code
        == 401
    )


def test_deleting_memory_leaves_affect_untouched(combined: TestClient) -> None:
    memory = client_for(combined, "memory", "/memory")
    aff = client_for(combined, "affect", "/affect")
    memory.upsert_many([chunk("shared-id", 1.0)], idempotency_key="m1")
    aff.put_many([affect("shared-id", "calm")], idempotency_key="a1")
    assert memory.delete_many(["shared-id"]) == {"deleted": 1}
    assert aff.get("shared-id")["mood"] == "calm"
    assert len(aff.history("shared-id")["items"]) == 1


def script(http: SyncHttpClient, prefix: str) -> list[Any]:
    """The same calls, recorded, for comparing combined and standalone apps."""
    memory = client_for(http, "memory", prefix.format(plane="memory"))
    aff = client_for(http, "affect", prefix.format(plane="affect"))
    out: list[Any] = [
        memory.describe_store(),
        memory.health(),
        memory.upsert_many([chunk("a", 1.0), chunk("b", -1.0)], idempotency_key="k"),
        memory.upsert_many([chunk("a", 1.0), chunk("b", -1.0)], idempotency_key="k"),
        [(r["chunk_id"], round(r["score"], 9)) for r in memory.search([1.0] + [0.0] * 7, top_k=2)],
        memory.get_many(["b", "a"]),
        memory.delete_many(["b"]),
        aff.describe_store(),
        aff.put_many([affect("x", "calm")], idempotency_key="k"),
        aff.put_many([affect("x", "tense")], idempotency_key="k2"),
    ]
    history = aff.history("x")
    out.append([(i["revision"], i["mood"]) for i in history["items"]])
    listing = aff.list()
    out.append([(i["key"], i["revision"]) for i in listing["items"]])
    return out


def test_each_plane_standalone_answers_like_the_combined_app(tmp_path: Any) -> None:
    def settings_in(sub: str) -> Settings:
        d = tmp_path / sub
        d.mkdir()
        return Settings(
            memory_db=str(d / "m.db"),
            affect_db=str(d / "a.db"),
            vmp_db=str(d / "v.db"),
            memory_embedding_dim=8,
            heimdall_key=KEY,
            allowed_hosts="testserver",
        )

    with TestClient(build_provider_app(settings_in("combined"))) as http:
        combined = script(http, "/{plane}")
    solo = settings_in("solo")
    planes: tuple[Plane, ...] = ("memory", "affect")
    apps = {p: build_provider_app(solo, (p,)) for p in planes}
    with TestClient(apps["memory"]) as m_http, TestClient(apps["affect"]) as a_http:

        class Router:
            """Posts each call to the standalone app of the plane its path names (the
            two TestClients close themselves)."""

            def post(self, url: str, *, content: bytes, headers: dict[str, str]) -> HttpResponse:
                path = httpx.URL(url).path
                target = m_http if path.startswith("/bifrost/memory") else a_http
                return target.post(url, content=content, headers=headers)

            def close(self) -> None:
                return None

        standalone = script(Router(), "")
    assert json.dumps(standalone, sort_keys=True) == json.dumps(combined, sort_keys=True)


def test_lifespan_closes_every_store(settings: Settings) -> None:
    app = build_provider_app(settings)
    with TestClient(app) as http:
        assert http.get("/healthz").status_code == 200
    assert app.state.planes.closed


def test_vmp_is_mounted_with_its_key(combined: TestClient) -> None:
    assert combined.get("/vmp/health").status_code == 401
    r = combined.get("/vmp/health", headers={"authorization": "Bearer vmp-test-key-0123456789"})
    assert r.status_code == 200
    assert r.json()["dim"] == 16
