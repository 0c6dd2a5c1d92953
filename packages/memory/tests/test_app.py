"""build_memory_provider_app: the seed's builds_app / bad_key, and the store over the wire."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

from bifrost.client import BifrostClient
from bifrost.errors import Forbidden, RevisionMismatch
from ratatoskr.memory import RatatoskrMemoryStore, build_memory_provider_app, open_memory_store
from ratatoskr.memory import app as memory_app

from .conftest import chunk, vec

KEY = b"test-heimdall-key-0123456789abcdef"


@pytest.fixture
def app_store() -> Iterator[RatatoskrMemoryStore]:
    s = open_memory_store(":memory:", embedding_dim=8)
    yield s
    s.close()


def test_builds_app(app_store: RatatoskrMemoryStore) -> None:
    app = build_memory_provider_app(app_store, KEY)
    routes = {(r.path, m) for r in app.routes if isinstance(r, Route) for m in r.methods or ()}
    assert ("/bifrost/handshake", "POST") in routes
    assert ("/bifrost/memory-call", "POST") in routes


def test_one_builder_one_name() -> None:
    # The seed contract's name is the only one (the *_plane_app alias went).
    assert memory_app.__all__ == ["build_memory_provider_app"]
    assert build_memory_provider_app is memory_app.build_memory_provider_app


def test_maintenance_store_is_kept_on_the_app(app_store: RatatoskrMemoryStore) -> None:
    marker = object()
    app = build_memory_provider_app(app_store, KEY, maintenance_store=marker)
    assert app.state.bifrost_maintenance_store is marker


def test_bad_key(app_store: RatatoskrMemoryStore) -> None:
    with pytest.raises(ValueError, match="heimdall_key"):
        build_memory_provider_app(app_store, b"")


def test_store_is_required() -> None:
    with pytest.raises(TypeError):
        build_memory_provider_app(None, KEY)  # type: ignore[arg-type]


def test_verbs_over_the_wire(app_store: RatatoskrMemoryStore) -> None:
    app = build_memory_provider_app(app_store, KEY)
    with TestClient(app) as http:
        client = BifrostClient(
            "http://testserver",
            KEY,
            actor="agent-1",
            scope={"tenant": "t1"},
            plane="memory",
            http_client=http,
        )
        hs = client.handshake()
        assert hs["consumer_id"] == "ratatoskr"
        assert hs["capabilities"] == app_store.describe_store()
        assert client.upsert_many([chunk("a", 1), chunk("b", 2)], idempotency_key="k1") == {
            "upserted": 2,
            "replayed": False,
        }
        rows = client.search(vec(1), top_k=1)
        assert rows[0]["chunk_id"] == "a"
        got = client.get("a")
        assert got is not None
        assert got["revision"] == 1
        with pytest.raises(RevisionMismatch):
            client.upsert_many([chunk("a", 3)], idempotency_key="k2", expected_revisions={"a": 7})
        with pytest.raises(Forbidden):
            client.upsert_many([chunk("c", 3, scope={"tenant": "t2"})], idempotency_key="k3")
        assert app_store.get("c") is None
        assert client.delete_many(["a", "zzz"]) == {"deleted": 1}
        assert client.get_many(["a", "b"])[0]["id"] == "b"
