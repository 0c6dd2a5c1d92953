"""A real ``ratatoskr serve`` for the package's tests (one per test session, per
xdist worker), its memory plane at the dimension of langchain-tests' fake embeddings,
and stores on it, each in a scope of its own (so each starts empty)."""

from __future__ import annotations

import inspect
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_ratatoskr import RatatoskrVectorStore
from langchain_tests.integration_tests import VectorStoreIntegrationTests

from ratatoskr.provider.testing import ServerProcess, start_serve

KEY = "langchain-heimdall-key-0123456789abcdef"
# langchain_tests.integration_tests.vectorstores.EMBEDDING_SIZE: the suite's fake
# embeddings (VectorStoreIntegrationTests.get_embeddings) have 6 dimensions.
DIM = 6
# What the filter tests name (the suite's documents carry metadata {"id": n}).
FILTERABLE = "metadata.id,metadata.kind,metadata.year,metadata.tags,metadata.user_id"


def embeddings() -> Embeddings:
    return DeterministicFakeEmbedding(size=DIM)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp: Path = tmp_path_factory.mktemp("langchain-serve")
    env = {
        "RATATOSKR_MEMORY_DB": str(tmp / "memory.db"),
        "RATATOSKR_AFFECT_DB": str(tmp / "affect.db"),
        "RATATOSKR_VMP_DB": str(tmp / "vmp.db"),
        "RATATOSKR_MEMORY_EMBEDDING_DIM": str(DIM),
        "RATATOSKR_MEMORY_FILTERABLE_FIELDS": FILTERABLE,
        "RATATOSKR_HEIMDALL_KEY": KEY,
        "RATATOSKR_VMP_API_KEY": "langchain-vmp-key-0123456789",
    }
    proc = start_serve(["serve"], env, tmp)
    yield proc
    # SIGTERM (so a measured child writes its coverage), then whatever is left.
    proc.stop(signal.SIGTERM, timeout=10)
    proc.close()


@pytest.fixture
def memory_url(server: ServerProcess) -> str:
    return server.url("memory")


def fresh_scope() -> dict[str, str]:
    """A tenant no other test uses: a store on it starts empty."""
    return {"tenant": f"t-{uuid.uuid4().hex}"}


@pytest_asyncio.fixture
async def store(memory_url: str) -> AsyncIterator[RatatoskrVectorStore]:
    """An empty store over HTTP; afterwards every record it wrote is deleted, and its
    connections (sync, and async ones opened in this test's loop) closed."""
    vs = RatatoskrVectorStore(embedding=embeddings(), url=memory_url, key=KEY, scope=fresh_scope())
    try:
        yield vs
    finally:
        await vs.adelete()
        assert await vs.asimilarity_search("anything", k=1) == []
        await vs.aclose()


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_pycollect_makeitem(
    collector: pytest.Module | pytest.Class, name: str, obj: object
) -> Iterator[None]:
    """Mark the coroutine tests of langchain-tests' suites for pytest-asyncio (strict
    mode; the suite's async tests carry no mark, and it forbids overriding its tests).
    Innermost wrapper: the mark is there before pytest-asyncio's wrapper looks."""
    outcome: Any = yield
    cls = getattr(collector, "cls", None)
    if not (isinstance(cls, type) and issubclass(cls, VectorStoreIntegrationTests)):
        return
    result = outcome.get_result()
    for item in result if isinstance(result, list) else [result]:
        if isinstance(item, pytest.Function) and inspect.iscoroutinefunction(item.obj):
            item.add_marker(pytest.mark.asyncio)


class KeyedEmbeddings(Embeddings):
    """Fixed vectors for the texts a test names (so scores and rankings are known);
    any other text gets the fake embedding of langchain-tests."""

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors = vectors
        self._other = embeddings()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        if text in self.vectors:
            return list(self.vectors[text])
        return self._other.embed_query(text)


def axis(i: int, *, also: int | None = None, weight: float = 1.0) -> list[float]:
    """A DIM-long vector along axis ``i`` (plus ``weight`` along ``also``)."""
    vec = [0.0] * DIM
    vec[i] = 1.0
    if also is not None:
        vec[also] = weight
    return vec
