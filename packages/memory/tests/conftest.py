"""Fixtures for the memory store tests: a store in memory, a store on disk, a caller."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bifrost.context import DispatchContext
from ratatoskr.memory import RatatoskrMemoryStore, open_memory_store
from ratatoskr.sqlite import ConnectionOptions

DIM = 8

# Stores that tests open in process: no fsync at each commit. What a store answers
# does not depend on it, and a SIGKILLed process's writes are in the page cache either
# way; the crash and durability tests (writer subprocesses) keep the real setting.
NO_FSYNC = ConnectionOptions(synchronous="OFF")


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RatatoskrMemoryStore]:
    path = ":memory:" if request.param == "memory" else str(tmp_path / "memory.db")
    s = open_memory_store(path, embedding_dim=DIM, options=NO_FSYNC)
    yield s
    s.close()


@pytest.fixture
def db_file(tmp_path: Path) -> str:
    return str(tmp_path / "memory.db")


@pytest.fixture
def ctx() -> DispatchContext:
    return DispatchContext(actor="agent-1", plane="memory", verb="upsert_many")


def vec(seed: int, dim: int = DIM) -> list[float]:
    rng = random.Random(seed)
    return [rng.uniform(-1, 1) for _ in range(dim)]


def chunk(cid: str, seed: int, scope: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": cid,
        "embedding": vec(seed),
        "scope": {"tenant": "t1"} if scope is None else scope,
        "content": f"content of {cid}",
        **extra,
    }
