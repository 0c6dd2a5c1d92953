"""Base of the memory-plane conformance kit: fixtures and helpers.

Contract for a store's test module::

    class TestMyStore(MemoryStoreConformance):
        @pytest.fixture
        def make_store(self, tmp_path) -> MemoryStoreFactory:
            def make(*, embedding_dim=8, max_batch=1000, max_top_k=1000, clock=time.time,
                     quota=NO_QUOTA):
                ...  # a fresh, empty, independent store on every call
            return make

``make_store`` must accept exactly those keyword arguments (``clock`` returns
seconds since the epoch and drives the idempotency TTL; ``quota``, a
:class:`bifrost.quota.Quota`, is the store's per-tenant quota); the kit's ``store``
fixture is ``make_store()`` (embedding_dim 8). Subclasses may override
``store`` but must keep it fresh and empty.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import pytest

from bifrost.consumer.testing.conformance._helpers import (
    DIM,
    basis,
    chunk,
    ctx,
    memory_snapshot,
)
from bifrost.memory.protocol import MemoryDataStore
from bifrost.quota import Quota

__all__ = ["CTX", "V1_CAPS", "MemoryKitBase", "MemoryStoreFactory", "seeded", "up"]

V1_CAPS = {
    "relational_edges_supported": False,
    "optimistic_locking_supported": True,
    "atomic_supersede_supported": False,
    "transaction_supported": False,
    "filterable_metadata_fields": [],
}
CTX = ctx()


class MemoryStoreFactory(Protocol):
    def __call__(
        self,
        *,
        embedding_dim: int = ...,
        max_batch: int = ...,
        max_top_k: int = ...,
        clock: Callable[[], float] = ...,
        quota: Quota = ...,
        max_page: int = ...,
        filterable_fields: Sequence[str] = ...,
    ) -> MemoryDataStore: ...


def up(store: MemoryDataStore, records: list[dict[str, Any]], key: str, **kw: Any) -> Any:
    return store.upsert_many(records, idempotency_key=key, ctx=kw.pop("ctx", CTX), **kw)


def seeded(store: MemoryDataStore) -> list[str]:
    up(
        store,
        [
            chunk("a", basis(0), {"tenant": "t1"}),
            chunk("b", basis(1), {"tenant": "t1", "end_user": "u1"}, distillate="b-view"),
        ],
        "seed",
    )
    return ["a", "b"]


class MemoryKitBase:
    """Fixtures of the memory kit (see the module docstring for the contract)."""

    @pytest.fixture
    def make_store(self) -> MemoryStoreFactory:
        raise NotImplementedError("subclass the kit and provide a make_store fixture")

    @pytest.fixture
    def store(self, make_store: MemoryStoreFactory) -> MemoryDataStore:
        return make_store(embedding_dim=DIM)

    @staticmethod
    def snap(store: MemoryDataStore, ids: list[str]) -> Callable[[], Any]:
        return lambda: memory_snapshot(store, ids)
