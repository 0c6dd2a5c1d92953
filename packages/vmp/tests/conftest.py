"""Fixtures for the VMP plane: a store in memory or on disk, the app, an HTTP caller."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from ratatoskr.vmp import VmpStore, build_vmp_app, open_vmp_store

DIM = 4
API_KEY = "test-key-0123456789"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
# What a raw body must be sent as (``json=`` sets the first by itself).
JSON_BODY = {"Content-Type": "application/json"}
SNAPSHOT_BODY = {"Content-Type": "application/octet-stream"}


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VmpStore]:
    path = ":memory:" if request.param == "memory" else str(tmp_path / "vmp.db")
    s = open_vmp_store(path, dim=DIM)
    yield s
    s.close()


@pytest.fixture
def app(store: VmpStore) -> Starlette:
    return build_vmp_app(store, api_key=API_KEY)


@pytest.fixture
def http(app: Starlette) -> Iterator[TestClient]:
    """An authenticated HTTP caller of the app."""
    with TestClient(app, headers=AUTH) as client:
        yield client


class AppTransport(httpx.BaseTransport):
    """Hands httpx requests to an ASGI app in-process, through Starlette's TestClient.

    The TestClient is built on httpx2, whose requests and responses are not httpx's:
    each request is rebuilt for it (method, URL, headers, body) and its answer
    rebuilt as an httpx response."""

    def __init__(self, app: Starlette) -> None:
        self._client = TestClient(app)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._client.request(
            request.method,
            str(request.url),
            headers=request.headers.multi_items(),
            content=request.read(),
        )
        return httpx.Response(
            response.status_code, headers=response.headers.multi_items(), content=response.content
        )

    def close(self) -> None:
        self._client.close()


def vec(seed: int, dim: int = DIM) -> list[float]:
    rng = random.Random(seed)
    return [rng.uniform(-100, 100) for _ in range(dim)]
