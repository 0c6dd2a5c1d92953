"""bifrost's affect conformance kit, run against this store in memory and on disk."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bifrost.consumer.testing.conformance import AffectStoreConformance, AffectStoreFactory
from bifrost.quota import NO_QUOTA, Quota
from ratatoskr.affect import RatatoskrAffectStore, open_affect_store

from .conftest import NO_FSYNC


@pytest.fixture(params=["memory", "file"])
def factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AffectStoreFactory]:
    opened: list[RatatoskrAffectStore] = []

    def make(
        *,
        max_batch: int = 1000,
        max_page: int = 500,
        clock: Callable[[], float] = time.time,
        quota: Quota = NO_QUOTA,
    ) -> RatatoskrAffectStore:
        # A fresh, empty, independent store on every call.
        path = ":memory:" if request.param == "memory" else str(tmp_path / f"a{len(opened)}.db")
        s = open_affect_store(
            path,
            max_batch=max_batch,
            max_page=max_page,
            clock=clock,
            quota=quota,
            options=NO_FSYNC,
        )
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


class TestRatatoskrAffectStore(AffectStoreConformance):
    @pytest.fixture
    def make_store(self, factory: AffectStoreFactory) -> AffectStoreFactory:
        return factory
