"""Retention and forget from bifrost's conformance kit, against the SQLite memory store
(in memory and on disk)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bifrost.consumer.testing.conformance.erasure import (
    MemoryErasureConformance,
    RetentionStoreFactory,
)
from ratatoskr.memory import SqliteMemoryStore, open_memory_store


class TestSqliteMemoryErasure(MemoryErasureConformance):
    @pytest.fixture(params=["memory", "file"])
    def make_store(
        self, request: pytest.FixtureRequest, tmp_path: Path
    ) -> Iterator[RetentionStoreFactory]:
        opened: list[SqliteMemoryStore] = []

        def make(
            *, retention_s: float | None = None, clock: Callable[[], float] = time.time
        ) -> SqliteMemoryStore:
            path = ":memory:" if request.param == "memory" else str(tmp_path / f"m{len(opened)}.db")
            s = open_memory_store(path, embedding_dim=8, retention_s=retention_s, clock=clock)
            opened.append(s)
            return s

        yield make
        for s in opened:
            s.close()
