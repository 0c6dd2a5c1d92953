"""bifrost's memory and affect conformance kits, run against the PostgreSQL stores
(a fresh schema per store, on the session's shared pool)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

import pytest

from bifrost.consumer.testing.conformance import (
    AffectStoreConformance,
    AffectStoreFactory,
    MemoryStoreConformance,
    MemoryStoreFactory,
)
from bifrost.quota import NO_QUOTA, Quota
from ratatoskr.affect.postgres import PostgresAffectStore, open_postgres_affect_store
from ratatoskr.memory.postgres import PostgresMemoryStore, open_postgres_memory_store
from ratatoskr.postgres import Pool

from .conftest import SchemaFactory


@pytest.fixture
def memory_factory(pg_pool: Pool, new_schema: SchemaFactory) -> Iterator[MemoryStoreFactory]:
    opened: list[PostgresMemoryStore] = []

    def make(
        *,
        embedding_dim: int = 8,
        max_batch: int = 1000,
        max_top_k: int = 1000,
        clock: Callable[[], float] = time.time,
        max_page: int = 1000,
        filterable_fields: Sequence[str] = (),
        quota: Quota = NO_QUOTA,
    ) -> PostgresMemoryStore:
        # A fresh, empty, independent store on every call: a schema of its own.
        s = open_postgres_memory_store(
            pg_pool,
            schema=new_schema(),
            embedding_dim=embedding_dim,
            max_batch=max_batch,
            max_top_k=max_top_k,
            clock=clock,
            max_page=max_page,
            filterable_fields=filterable_fields,
            quota=quota,
        )
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


@pytest.fixture
def affect_factory(pg_pool: Pool, new_schema: SchemaFactory) -> Iterator[AffectStoreFactory]:
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


class TestPostgresMemoryStore(MemoryStoreConformance):
    @pytest.fixture
    def make_store(self, memory_factory: MemoryStoreFactory) -> MemoryStoreFactory:
        return memory_factory


class TestPostgresAffectStore(AffectStoreConformance):
    @pytest.fixture
    def make_store(self, affect_factory: AffectStoreFactory) -> AffectStoreFactory:
        return affect_factory
