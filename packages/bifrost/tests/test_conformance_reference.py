"""The conformance kit against the reference stores (the kit's own self-test)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import pytest

from bifrost.consumer.testing import InMemoryAffectStore, InMemoryMemoryStore
from bifrost.consumer.testing.conformance import (
    AffectStoreConformance,
    AffectStoreFactory,
    MemoryStoreConformance,
    MemoryStoreFactory,
)
from bifrost.quota import NO_QUOTA, Quota


class TestInMemoryMemoryStore(MemoryStoreConformance):
    @pytest.fixture
    def make_store(self) -> MemoryStoreFactory:
        def make(
            *,
            embedding_dim: int = 8,
            max_batch: int = 1000,
            max_top_k: int = 1000,
            clock: Callable[[], float] = time.time,
            quota: Quota = NO_QUOTA,
            max_page: int = 1000,
            filterable_fields: Sequence[str] = (),
        ) -> InMemoryMemoryStore:
            return InMemoryMemoryStore(
                embedding_dim,
                max_batch=max_batch,
                max_top_k=max_top_k,
                clock=clock,
                quota=quota,
                max_page=max_page,
                filterable_fields=filterable_fields,
            )

        return make


class TestInMemoryAffectStore(AffectStoreConformance):
    @pytest.fixture
    def make_store(self) -> AffectStoreFactory:
        def make(
            *,
            max_batch: int = 1000,
            max_page: int = 500,
            clock: Callable[[], float] = time.time,
            quota: Quota = NO_QUOTA,
        ) -> InMemoryAffectStore:
            return InMemoryAffectStore(
                max_batch=max_batch, max_page=max_page, clock=clock, quota=quota
            )

        return make
