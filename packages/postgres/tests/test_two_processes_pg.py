"""Two processes (and two independent openers) on one PostgreSQL schema.

The planes' own two-process workloads, on PostgreSQL:

- memory's ``concurrent_worker`` (``packages/memory/tests/test_two_processes.py``)
  in two processes at once, run unchanged through :mod:`workers_pg`, both opening
  the schema for the first time together (the migration runs once, under the
  advisory lock): no error, each sees its own writes at once, and the counts
  are exact afterwards;
- memory's "index follows writes of another store" and affect's "two openers
  interleave whole batches" (``packages/affect/tests/test_concurrency.py``), the
  planes' own test functions with their opener pointed at the schema (each store
  on a pool of its own: separate connections, as two processes have).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ...affect.tests import test_concurrency as affect_concurrency
from ...memory.tests import test_two_processes as memory_two
from .backends_pg import Place, scratch_schema

ROOT = Path(__file__).resolve().parents[3]  # `-m packages.postgres.tests.workers_pg` from here


@pytest.fixture
def place(pg_dsn: str) -> Iterator[Place]:
    with scratch_schema(pg_dsn) as schema:
        yield Place("postgres", pg_dsn, schema)


@pytest.mark.slow
def test_two_processes_share_one_schema(place: Place) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    rounds = memory_two.ROUNDS // 2  # 30 interleaved rounds each, half the SQLite run
    argv = ["-m", "packages.postgres.tests.workers_pg", "memory-concurrent", *place.argv()]
    procs = [
        subprocess.Popen(
            [sys.executable, *argv, name, str(rounds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name in ("alpha", "beta")
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-2000:]
        assert out.strip() == "ok"
    store = place.open_memory(embedding_dim=8)
    per_name = rounds * 10 - rounds // 5  # ten per round, one deleted every fifth
    assert store.count() == 2 * per_name
    for name in ("alpha", "beta"):
        rows = store.search([1.0] * 8, top_k=1000, scope_all={"tenant": name})
        assert len(rows) == per_name
        assert all(r["chunk_id"].startswith(f"{name}-") for r in rows)
    store.close()


def test_a_second_store_sees_the_first_ones_writes(
    place: Place, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def open_at_place(_path: str, **limits: Any) -> Any:
        return place.open_memory(**limits)

    monkeypatch.setattr(memory_two, "open_memory_store", open_at_place)
    memory_two.test_index_follows_writes_of_another_store_on_the_same_file(tmp_path)


def test_two_affect_openers_interleave_whole_batches(
    place: Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    def open_at_place(_path: str, **limits: Any) -> Any:
        return place.open_affect(**limits)

    monkeypatch.setattr(affect_concurrency, "open_affect_store", open_at_place)
    affect_concurrency.test_two_openers_of_one_file_interleave_whole_batches("-")
