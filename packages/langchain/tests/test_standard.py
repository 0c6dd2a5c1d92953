"""LangChain's own standard suite (langchain-tests' ``VectorStoreIntegrationTests``,
sync and async in one class) against ``RatatoskrVectorStore`` on a real ``ratatoskr
serve``; and the same suite on a local memory file (``RatatoskrVectorStore.local``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from langchain_core.vectorstores import VectorStore
from langchain_ratatoskr import RatatoskrVectorStore
from langchain_tests.integration_tests import VectorStoreIntegrationTests

from .conftest import DIM


class TestRatatoskrVectorStore(VectorStoreIntegrationTests):
    @pytest_asyncio.fixture
    async def vectorstore(self, store: RatatoskrVectorStore) -> AsyncIterator[VectorStore]:  # type: ignore[override]
        yield store


class TestLocalRatatoskrVectorStore(VectorStoreIntegrationTests):
    @pytest_asyncio.fixture
    async def vectorstore(self, tmp_path: Path) -> AsyncIterator[VectorStore]:  # type: ignore[override]
        local = RatatoskrVectorStore.local(
            tmp_path / "memory.db", self.get_embeddings(), scope={"tenant": "acme"}
        )
        try:
            yield local
        finally:
            await local.aclose()

    def test_local_dimension_is_the_embedders(self, tmp_path: Path) -> None:
        with RatatoskrVectorStore.local(tmp_path / "m.db", self.get_embeddings()) as local:
            assert local._run(local._limits())["embedding_dim"] == DIM
