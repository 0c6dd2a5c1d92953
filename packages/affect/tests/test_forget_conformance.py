"""forget from bifrost's conformance kit, against the SQLite affect store."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bifrost.consumer.testing.conformance import AffectStoreFactory
from bifrost.consumer.testing.conformance.erasure import AffectForgetConformance
from bifrost.quota import NO_QUOTA, Quota
from ratatoskr.affect import RatatoskrAffectStore, open_affect_store


class TestSqliteAffectForget(AffectForgetConformance):
    @pytest.fixture
    def make_store(self, tmp_path: Path) -> Iterator[AffectStoreFactory]:
        opened: list[RatatoskrAffectStore] = []

        def make(
            *,
            max_batch: int = 1000,
            max_page: int = 500,
            clock: Callable[[], float] = time.time,
            quota: Quota = NO_QUOTA,
        ) -> RatatoskrAffectStore:
            s = open_affect_store(
                str(tmp_path / f"a{len(opened)}.db"),
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
