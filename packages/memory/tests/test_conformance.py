"""bifrost's memory conformance kit, run against this store in memory and on disk."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from bifrost.consumer.testing.conformance import MemoryStoreConformance, MemoryStoreFactory
from bifrost.quota import NO_QUOTA, Quota
from ratatoskr.memory import RatatoskrMemoryStore, open_memory_store

from .conftest import NO_FSYNC


@pytest.fixture(params=["memory", "file"])
def factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStoreFactory]:
    opened: list[RatatoskrMemoryStore] = []

    def make(
        *,
        embedding_dim: int = 8,
        max_batch: int = 1000,
        max_top_k: int = 1000,
        clock: Callable[[], float] = time.time,
        quota: Quota = NO_QUOTA,
        max_page: int = 1000,
        filterable_fields: Sequence[str] = (),
    ) -> RatatoskrMemoryStore:
        # A fresh, empty, independent store on every call.
        path = ":memory:" if request.param == "memory" else str(tmp_path / f"m{len(opened)}.db")
        s = open_memory_store(
            path,
            embedding_dim=embedding_dim,
            max_batch=max_batch,
            max_top_k=max_top_k,
            clock=clock,
            quota=quota,
            max_page=max_page,
            filterable_fields=filterable_fields,
            options=NO_FSYNC,
        )
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


class TestRatatoskrMemoryStore(MemoryStoreConformance):
    @pytest.fixture
    def make_store(self, factory: MemoryStoreFactory) -> MemoryStoreFactory:
        return factory
