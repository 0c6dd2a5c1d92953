"""Parity: identical envelope sequences through dispatch_memory_call against this store
and the reference InMemoryMemoryStore give equal results (ids, order, revisions,
shapes, error codes; scores within 1e-5) — under grants, too. The sequences are the
kit's (``memory_workload``), the same every backend runs."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from bifrost.consumer.testing import InMemoryMemoryStore
from bifrost.consumer.testing.conformance import MEMORY_DIM, memory_workload, run_parity
from bifrost.context import DispatchContext
from ratatoskr.memory import open_memory_store


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("grant", [{}, {"tenant": "t1"}, {"tenant": "t2", "end_user": "u1"}])
def test_parity_with_reference(seed: int, grant: dict[str, str], tmp_path: Path) -> None:
    rng = random.Random(seed)
    ours = open_memory_store(str(tmp_path / "p.db"), embedding_dim=MEMORY_DIM)
    reference = InMemoryMemoryStore(MEMORY_DIM)
    ctx = DispatchContext(actor="agent", scope=grant, plane="memory")
    outcomes = run_parity(ours, reference, memory_workload(rng, 150, grant), ctx)
    assert any(o["ok"] and isinstance(o["result"], list) and o["result"] for o in outcomes)
    codes = {o["code"] for o in outcomes if not o["ok"]}  # the sequences exercise errors too
    assert {"memory.idempotency_conflict", "memory.revision_mismatch"} <= codes
    ours.close()
