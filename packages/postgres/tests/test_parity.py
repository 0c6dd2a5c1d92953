"""Parity: random envelope sequences through bifrost's dispatch give the PostgreSQL stores
and the reference stores identical outcomes (results, order, revisions, error codes and
details; scores within 1e-5), under grants too. And the PostgreSQL memory store scores
bit for bit like the SQLite store (the same stored form and float64 re-rank)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from bifrost.consumer.testing import InMemoryAffectStore, InMemoryMemoryStore
from bifrost.consumer.testing.conformance import (
    MEMORY_DIM,
    ManualClock,
    memory_workload,
    run_affect_parity,
    run_parity,
)
from bifrost.context import DispatchContext
from ratatoskr.affect.postgres import open_postgres_affect_store
from ratatoskr.memory import open_memory_store
from ratatoskr.memory.postgres import open_postgres_memory_store
from ratatoskr.postgres import Pool


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("grant", [{}, {"tenant": "t1"}, {"tenant": "t2", "end_user": "u1"}])
def test_memory_parity_with_reference(
    seed: int, grant: dict[str, str], pg_pool: Pool, schema: str
) -> None:
    rng = random.Random(seed)
    ours = open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=MEMORY_DIM)
    reference = InMemoryMemoryStore(MEMORY_DIM)
    ctx = DispatchContext(actor="agent", scope=grant, plane="memory")
    outcomes = run_parity(ours, reference, memory_workload(rng, 150, grant), ctx)
    assert any(o["ok"] and isinstance(o["result"], list) and o["result"] for o in outcomes)
    codes = {o["code"] for o in outcomes if not o["ok"]}  # the sequences exercise errors too
    assert {"memory.idempotency_conflict", "memory.revision_mismatch"} <= codes


@pytest.mark.parametrize("seed", range(6))
def test_affect_parity_with_reference(seed: int, pg_pool: Pool, schema: str) -> None:
    clock = ManualClock()
    real = open_postgres_affect_store(pg_pool, schema=schema, max_batch=5, max_page=5, clock=clock)
    ref = InMemoryAffectStore(max_batch=5, max_page=5, clock=clock)
    kinds = run_affect_parity(real, ref, random.Random(seed), clock)
    assert {"ok", "InvalidArguments", "Forbidden"} <= kinds


def test_memory_scores_equal_the_sqlite_store(pg_pool: Pool, schema: str, tmp_path: Path) -> None:
    """384 dimensions, 600 chunks in 12 tenants, near-duplicates included: the same ids,
    order, revisions and bit-equal scores from both backends, in every filter mode."""
    dim = 384
    rng = random.Random(7)
    pg = open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=dim)
    lite = open_memory_store(str(tmp_path / "m.db"), embedding_dim=dim)
    ctx = DispatchContext(actor="a", plane="memory")
    base = [[rng.gauss(0, 1) for _ in range(dim)] for _ in range(40)]
    recs = []
    for i in range(600):
        centre = base[i % 40]
        vec = [x + rng.gauss(0, 0.05 if i % 3 else 1e-9) for x in centre]
        scope = {"tenant": f"t{i % 12}"}
        if i % 5 == 0:
            scope["end_user"] = f"u{i % 7}"
        recs.append({"id": f"c{i:04}", "embedding": vec, "scope": scope, "content": str(i)})
    for start in range(0, 600, 100):
        for s in (pg, lite):
            s.upsert_many(recs[start : start + 100], idempotency_key=f"k{start}", ctx=ctx)
    filters: list[dict[str, Any]] = [
        {},
        {"scope_all": {"tenant": "t3"}},
        {"scope_any": [{"end_user": "u1"}, {"tenant": "t5"}]},
        {"scope_all": {"tenant": "t0"}, "scope_any": [{"end_user": "u0"}, {"end_user": "u5"}]},
    ]
    for q in range(8):
        probe = [x + rng.gauss(0, 0.01) for x in base[q]]
        for f in filters:
            for top_k in (1, 10, 60):
                a = pg.search(probe, top_k=top_k, **f)
                b = lite.search(probe, top_k=top_k, **f)
                assert [(r["chunk_id"], r["score"], r["revision"]) for r in a] == [
                    (r["chunk_id"], r["score"], r["revision"]) for r in b
                ]
                assert a == b
    lite.close()
