"""Retention and forget from bifrost's conformance kit, against the PostgreSQL memory
and affect stores (a schema of their own per store)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from bifrost.consumer.testing.conformance import AffectStoreFactory
from bifrost.consumer.testing.conformance.erasure import (
    AffectForgetConformance,
    MemoryErasureConformance,
    RetentionStoreFactory,
)
from bifrost.quota import NO_QUOTA, Quota
from ratatoskr.affect.postgres import PostgresAffectStore, open_postgres_affect_store
from ratatoskr.memory.postgres import PostgresMemoryStore, open_postgres_memory_store
from ratatoskr.postgres import Pool

from .conftest import SchemaFactory


class TestPostgresMemoryErasure(MemoryErasureConformance):
    @pytest.fixture
    def make_store(
        self, pg_pool: Pool, new_schema: SchemaFactory
    ) -> Iterator[RetentionStoreFactory]:
        opened: list[PostgresMemoryStore] = []

        def make(
            *, retention_s: float | None = None, clock: Callable[[], float] = time.time
        ) -> PostgresMemoryStore:
            s = open_postgres_memory_store(
                pg_pool,
                schema=new_schema(),
                embedding_dim=8,
                retention_s=retention_s,
                clock=clock,
            )
            opened.append(s)
            return s

        yield make
        for s in opened:
            s.close()


class TestPostgresAffectForget(AffectForgetConformance):
    @pytest.fixture
    def make_store(self, pg_pool: Pool, new_schema: SchemaFactory) -> Iterator[AffectStoreFactory]:
        opened: list[PostgresAffectStore] = []

        def make(
            *,
            max_batch: int = 1000,
            max_page: int = 500,
            clock: Callable[[], float] = time.time,
            quota: Quota = NO_QUOTA,
        ) -> PostgresAffectStore:
            s = open_postgres_affect_store(
                pg_pool,
                schema=new_schema(),
                max_batch=max_batch,
                max_page=max_page,
                clock=clock,
                quota=quota,
            )
            opened.append(s)
            return s

        yield make
        for s in opened:
            s.close()
