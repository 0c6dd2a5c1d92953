"""Parity: the SQLite store and bifrost's ``InMemoryAffectStore`` (the reference)
answer identical envelope sequences through ``dispatch_affect_call`` identically —
results, ``recorded_at`` stamps (same clock), error types, messages and details. The
sequences are the kit's (``run_affect_parity``), the same every backend runs."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from bifrost.consumer.testing import InMemoryAffectStore
from bifrost.consumer.testing.conformance import ManualClock, run_affect_parity
from ratatoskr.affect import open_affect_store


@pytest.mark.parametrize("where", ["memory", "file"])
@pytest.mark.parametrize("seed", range(12))
def test_random_envelope_sequences_match_the_reference(
    tmp_path: Path, where: str, seed: int
) -> None:
    clock = ManualClock()
    path = ":memory:" if where == "memory" else str(tmp_path / "affect.db")
    real = open_affect_store(path, max_batch=5, max_page=5, clock=clock)
    ref = InMemoryAffectStore(max_batch=5, max_page=5, clock=clock)
    kinds = run_affect_parity(real, ref, random.Random(seed), clock)
    assert {"ok", "InvalidArguments", "Forbidden"} <= kinds
    real.close()
