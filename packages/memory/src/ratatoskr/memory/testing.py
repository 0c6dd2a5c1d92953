"""Memory chunks for tests and benchmarks: one builder, and the embeddings to put in it.

One home for each kind of test helper:

- memory chunks and embeddings: here (``ratatoskr.memory.testing``);
- envelopes, their bytes and signed headers: :mod:`bifrost.consumer.testing.helpers`;
- the conformance kit's own records: :mod:`bifrost.consumer.testing.conformance`;
- real server processes: :mod:`ratatoskr.provider.testing`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

DIM = 8


def one_hot(i: int, dim: int = DIM, *, rest: float = 0.0) -> list[float]:
    """``1.0`` at ``i % dim`` and ``rest`` everywhere else: ``i`` picks which of ``dim``
    well-separated directions a chunk points in (``rest`` > 0 keeps it off the axes)."""
    return [1.0 if d == i % dim else rest for d in range(dim)]


def seeded(seed: int, dim: int = DIM) -> list[float]:
    """``dim`` components uniform in [-1, 1], the same for the same ``seed``."""
    rng = random.Random(seed)  # noqa: S311 - test vectors, not secrets
    return [rng.uniform(-1, 1) for _ in range(dim)]


def chunk(
    cid: str,
    embedding: Sequence[float],
    scope: dict[str, str] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A chunk record as a client sends it: ``id``, ``embedding``, ``scope`` (a copy; ``{}``
    by default), then ``fields`` (``content``, ``metadata``, ``fidelity``, or anything a
    test of bad input wants on it)."""
    return {"id": cid, "embedding": list(embedding), "scope": dict(scope or {}), **fields}
