"""``MemoryStoreConformance``: the whole memory-plane conformance kit.

A real store's test module subclasses it and provides ``make_store``::

    import time
    import pytest
    from bifrost.consumer.testing.conformance import MemoryStoreConformance

    class TestSqliteMemoryStore(MemoryStoreConformance):
        @pytest.fixture
        def make_store(self, tmp_path):
            def make(*, embedding_dim=8, max_batch=1000, max_top_k=1000, clock=time.time,
                     quota=NO_QUOTA):
                path = tmp_path / f"{uuid.uuid4()}.db"
                return open_memory_store(str(path), embedding_dim=embedding_dim,
                                         max_batch=max_batch, max_top_k=max_top_k, clock=clock,
                                         quota=quota)
            return make

``make_store`` returns a fresh, empty, independent store on every call and
accepts exactly those keyword arguments; ``clock`` (seconds since the epoch)
must drive the idempotency TTL; ``quota`` is the store's per-tenant quota
(:class:`bifrost.quota.Quota`, default ``NO_QUOTA``). The kit's ``store`` fixture is
``make_store(embedding_dim=8)``.
"""

from __future__ import annotations

from bifrost.consumer.testing.conformance.grants import MemoryGrantTests
from bifrost.consumer.testing.conformance.memory_filter import MemoryFilterTests
from bifrost.consumer.testing.conformance.memory_read import MemoryReadTests
from bifrost.consumer.testing.conformance.memory_scan import MemoryScanTests
from bifrost.consumer.testing.conformance.memory_search import MemorySearchTests
from bifrost.consumer.testing.conformance.memory_upsert import MemoryUpsertTests
from bifrost.consumer.testing.conformance.quota import MemoryQuotaTests

__all__ = ["MemoryStoreConformance"]


class MemoryStoreConformance(
    MemoryUpsertTests,
    MemorySearchTests,
    MemoryReadTests,
    MemoryGrantTests,
    MemoryQuotaTests,
    MemoryScanTests,
    MemoryFilterTests,
):
    """Every seed TESTS entry and every rule of memory-plane.md (scan and metadata
    filters included), the write grant and the per-tenant quota."""
