"""Retention and forget from the conformance kit against the reference stores."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from bifrost.consumer.testing import InMemoryAffectStore, InMemoryMemoryStore
from bifrost.consumer.testing.conformance import AffectStoreFactory
from bifrost.consumer.testing.conformance.erasure import (
    AffectForgetConformance,
    MemoryErasureConformance,
    RetentionStoreFactory,
)
from bifrost.quota import NO_QUOTA, Quota


class TestInMemoryMemoryErasure(MemoryErasureConformance):
    @pytest.fixture
    def make_store(self) -> RetentionStoreFactory:
        def make(
            *, retention_s: float | None = None, clock: Callable[[], float] = time.time
        ) -> InMemoryMemoryStore:
            return InMemoryMemoryStore(8, retention_s=retention_s, clock=clock)

        return make


class TestInMemoryAffectForget(AffectForgetConformance):
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
