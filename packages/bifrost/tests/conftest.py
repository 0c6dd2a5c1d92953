"""Fixtures: a verifier, spy/reference stores, and a signing ``Wire`` per plane app."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from bifrost.consumer import ConsumerRegistration, build_affect_app, build_memory_app
from bifrost.consumer.testing import InMemoryAffectStore
from bifrost.consumer.testing.support import DIM, KEY, SpyMemoryStore, Wire
from bifrost.reference_server import JwtVerifier


@pytest.fixture
def verifier() -> JwtVerifier:
    return JwtVerifier(KEY)


@pytest.fixture
def memory_store() -> SpyMemoryStore:
    return SpyMemoryStore(DIM)


@pytest.fixture
def affect_store() -> InMemoryAffectStore:
    return InMemoryAffectStore()


@pytest.fixture
def memory_wire(memory_store: SpyMemoryStore, verifier: JwtVerifier) -> Iterator[Wire]:
    app = build_memory_app(memory_store, verifier, ConsumerRegistration())
    with TestClient(app) as client:
        yield Wire(client, "memory")


@pytest.fixture
def affect_wire(affect_store: InMemoryAffectStore, verifier: JwtVerifier) -> Iterator[Wire]:
    app = build_affect_app(affect_store, verifier, ConsumerRegistration())
    with TestClient(app) as client:
        yield Wire(client, "affect")
