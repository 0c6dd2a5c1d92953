"""Two processes writing and searching one file at once: no "database is locked",
each sees the other's writes, and the index stays one-to-one with the chunks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bifrost.context import DispatchContext
from ratatoskr.memory import open_memory_store

WORKER = Path(__file__).with_name("concurrent_worker.py")
ROUNDS = 60


@pytest.mark.slow
@pytest.mark.parametrize("retention", [10_000, 2], ids=["default", "tombstones-pruned"])
def test_two_processes_share_one_file(tmp_path: Path, retention: int) -> None:
    """With a retention of 2 change-counter values each process keeps falling behind
    the other's horizon and reloads; the answers stay exact all the same."""
    db = str(tmp_path / "shared.db")
    open_memory_store(db, embedding_dim=8).close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), db, name, str(ROUNDS), str(retention)],
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
        assert "locked" not in err
        assert out.strip() == "ok"
    store = open_memory_store(db, embedding_dim=8)
    per_name = ROUNDS * 10 - ROUNDS // 5
    assert store.count() == 2 * per_name
    for name in ("alpha", "beta"):
        rows = store.search([1.0] * 8, top_k=1000, scope_all={"tenant": name})
        assert len(rows) == per_name
    with store.database.read() as conn:
        assert (
            conn.execute("SELECT count(*) FROM memory_vec").fetchall()
            == conn.execute("SELECT count(*) FROM memory_chunks").fetchall()
        )
        tombstones = int(conn.execute("SELECT count(*) FROM memory_tombstones").fetchall()[0][0])  # type: ignore[arg-type]
    if retention > 2 * ROUNDS:
        assert tombstones == 2 * (ROUNDS // 5)  # every delete's, kept
    else:
        assert tombstones <= retention  # one id per delete, the last few counter values
    store.close()


def test_index_follows_writes_of_another_store_on_the_same_file(tmp_path: Path) -> None:
    db = str(tmp_path / "two.db")
    a = open_memory_store(db, embedding_dim=2)
    b = open_memory_store(db, embedding_dim=2)
    ctx = DispatchContext(actor="x")
    a.upsert_many([{"id": "p", "embedding": [1.0, 0.0], "scope": {}}], idempotency_key="1", ctx=ctx)
    assert [r["chunk_id"] for r in b.search([1.0, 0.0], top_k=5)] == ["p"]
    a.upsert_many(
        [{"id": "p", "embedding": [0.0, 1.0], "scope": {"tenant": "t"}}],
        idempotency_key="2",
        ctx=ctx,
    )
    rows = b.search([0.0, 1.0], top_k=5, scope_all={"tenant": "t"})
    assert [(r["chunk_id"], r["revision"], round(r["score"], 6)) for r in rows] == [("p", 2, 1.0)]
    a.delete_many(["p"])
    assert b.search([0.0, 1.0], top_k=5) == []
    # many rows at once: b reloads rather than catching up row by row
    a.upsert_many(
        [{"id": f"r{i}", "embedding": [1.0, i / 2000], "scope": {}} for i in range(1000)],
        idempotency_key="3",
        ctx=ctx,
    )
    a.upsert_many(
        [{"id": f"s{i}", "embedding": [1.0, -i / 2000], "scope": {}} for i in range(1000)],
        idempotency_key="4",
        ctx=ctx,
    )
    assert len(b.search([1.0, 0.0], top_k=1000)) == 1000
    assert b.search([1.0, 0.0], top_k=1)[0]["chunk_id"] == "r0"
    a.close()
    b.close()


def test_a_search_on_a_stale_index_sees_what_another_store_wrote_since(tmp_path: Path) -> None:
    """The search ranks on its index first and reads the change counter with the
    records: a counter moved by another store's write sends it back to catch up, so
    a better chunk written there (its own candidates still existing) is not missed,
    and a stale candidate's old vector is never scored."""
    db = str(tmp_path / "stale.db")
    a = open_memory_store(db, embedding_dim=2)
    b = open_memory_store(db, embedding_dim=2)
    ctx = DispatchContext(actor="x")
    a.upsert_many(
        [{"id": "old", "embedding": [1.0, 0.5], "scope": {}}], idempotency_key="1", ctx=ctx
    )
    assert [r["chunk_id"] for r in b.search([1.0, 0.0], top_k=2)] == ["old"]
    a.upsert_many(
        [{"id": "new", "embedding": [1.0, 0.0], "scope": {}}], idempotency_key="2", ctx=ctx
    )
    rows = b.search([1.0, 0.0], top_k=2)
    assert [(r["chunk_id"], r["revision"]) for r in rows] == [("new", 1), ("old", 1)]
    assert rows[0]["score"] == 1.0
    a.upsert_many(
        [{"id": "old", "embedding": [0.0, 1.0], "scope": {}}], idempotency_key="3", ctx=ctx
    )
    rows = b.search([1.0, 0.0], top_k=1)
    assert [(r["chunk_id"], r["score"]) for r in rows] == [("new", 1.0)]
    assert [r["revision"] for r in b.search([0.0, 1.0], top_k=1)] == [2]
    a.close()
    b.close()
