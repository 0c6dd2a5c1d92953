"""Fixtures for the affect store tests: a store in memory and on disk, a clock, a caller."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bifrost.context import DispatchContext
from ratatoskr.affect import RatatoskrAffectStore, open_affect_store
from ratatoskr.sqlite import ConnectionOptions

# Stores that tests open in process: no fsync at each commit. What a store answers
# does not depend on it, and a SIGKILLed process's writes are in the page cache either
# way; the crash and durability tests (writer subprocesses) keep the real setting.
NO_FSYNC = ConnectionOptions(synchronous="OFF")


class FakeClock:
    """Seconds since the epoch; advances a millisecond per reading so stamps differ."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 0.001
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["memory", "file"])
def store(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> Iterator[RatatoskrAffectStore]:
    path = ":memory:" if request.param == "memory" else str(tmp_path / "affect.db")
    s = open_affect_store(path, clock=clock, options=NO_FSYNC)
    yield s
    s.close()


@pytest.fixture
def db_file(tmp_path: Path) -> str:
    return str(tmp_path / "affect.db")


@pytest.fixture
def ctx() -> DispatchContext:
    return DispatchContext(actor="agent-1", plane="affect", verb="put_many")


def rec(key: str, scope: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    """An affect record: the two fields the store reads plus opaque payload."""
    return {
        "key": key,
        "scope": {"tenant": "t1"} if scope is None else scope,
        "valence": 0.25,
        "labels": ["calm"],
        **extra,
    }


def strip(record: dict[str, Any]) -> dict[str, Any]:
    """A returned record without the store-owned fields."""
    return {k: v for k, v in record.items() if k not in ("revision", "recorded_at")}
