"""`ratatoskr compact`: deleting most of a store and compacting gives the space back,
beside nothing else; a missing file is a one-line refusal."""

from __future__ import annotations

import os
from pathlib import Path

from bifrost.context import DispatchContext
from ratatoskr.memory import open_memory_store

from .test_cli import Run, assert_refused, env, run

__all__ = ["env", "run"]  # the fixtures, re-used


def _size(path: str) -> int:
    return sum(os.path.getsize(p) for p in (path, f"{path}-wal") if os.path.exists(p))


def test_compact_gives_deleted_space_back(run: Run, tmp_path: Path, env: dict[str, str]) -> None:
    path = env["RATATOSKR_MEMORY_DB"]
    store = open_memory_store(path, embedding_dim=8)
    ctx = DispatchContext(actor="a")
    records = [
        {"id": f"c{i}", "embedding": [float(i % 7) + 0.5] * 8, "scope": {}, "pad": "x" * 2000}
        for i in range(2000)
    ]
    for start in range(0, 2000, 500):
        store.upsert_many(records[start : start + 500], idempotency_key=f"k{start}", ctx=ctx)
    for start in (0, 580):  # 58% of the chunks, in batches under max_batch
        store.delete_many([f"c{i}" for i in range(start, start + 580)])
    store.close()
    before = _size(path)
    result = run(["compact", "--plane", "memory"], env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ratatoskr: memory: ")
    assert _size(path) < 0.6 * before
    store = open_memory_store(path, embedding_dim=8)
    assert store.count() == 840
    store.close()


def test_compact_of_a_missing_file_is_refused(
    run: Run, tmp_path: Path, env: dict[str, str]
) -> None:
    result = run(["compact", "--plane", "affect"], env, tmp_path)
    assert_refused(result, "RATATOSKR_AFFECT_DB")
    assert not os.path.exists(env["RATATOSKR_AFFECT_DB"])
