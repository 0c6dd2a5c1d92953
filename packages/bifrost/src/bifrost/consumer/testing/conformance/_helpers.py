"""Helpers shared by the conformance kit: a manual clock, vectors, records,
and observable-state snapshots."""

from __future__ import annotations

import contextlib
import math
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from bifrost.context import DispatchContext
from bifrost.errors import BifrostError, IdempotencyConflict

DIM = 8
T0 = 1_750_000_000.0


class ManualClock:
    """A clock for TTL tests: ``clock()`` returns the current time, ``advance(s)`` moves it."""

    def __init__(self, start: float = T0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


_P = TypeVar("_P")

IDEMPOTENCY_TTLS: list[tuple[str | None, int]] = [
    (None, 86400),
    ("default", 86400),
    ("ephemeral", 900),
    ("durable", 604800),
]
"""Each idempotency class and the seconds its ledger entry lives, as the wire spec says."""


def ledger_lifetime(
    write: Callable[[_P], Any],
    clock: ManualClock,
    ttl: int,
    *,
    first: _P,
    other: _P,
    after: _P,
) -> None:
    """One key's ledger entry over its ``ttl`` (``write(payload)`` writes under that key):
    a second before it ends the ``first`` payload replays and an ``other`` one
    conflicts; a second after, the entry counts as absent and ``after`` is a first call."""
    write(first)
    clock.advance(ttl - 1)
    assert write(first)["replayed"] is True
    with pytest.raises(IdempotencyConflict):
        write(other)
    clock.advance(2)  # expired: the entry counts as absent
    assert write(after)["replayed"] is False


def run_concurrently(work: Callable[[int], None], workers: int = 4) -> list[BaseException]:
    """Run ``work(0)`` … ``work(workers - 1)`` each in a thread of its own, all at once;
    the exceptions they raised (none, for a store that is thread-safe)."""
    errors: list[BaseException] = []

    def run(t: int) -> None:
        try:
            work(t)
        except BaseException as exc:  # pragma: no cover - reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(workers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return errors


def ctx(actor: str = "agent-a", scope: dict[str, str] | None = None, **kw: Any) -> DispatchContext:
    return DispatchContext(actor=actor, scope=dict(scope or {}), **kw)


def basis(i: int, dim: int = DIM, scale: float = 1.0) -> list[float]:
    v = [0.0] * dim
    v[i % dim] = scale
    return v


def mix(weights: dict[int, float], dim: int = DIM) -> list[float]:
    v = [0.0] * dim
    for i, w in weights.items():
        v[i] = w
    return v


def rand_vec(rng: random.Random, dim: int = DIM) -> list[float]:
    while True:
        v = [rng.uniform(-1.0, 1.0) for _ in range(dim)]
        if math.hypot(*v) > 0.1:
            return v


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (math.hypot(*a) * math.hypot(*b))


def chunk(
    cid: str, embedding: list[float], scope: dict[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "id": cid,
        "embedding": embedding,
        "scope": dict(scope or {}),
        "content": f"content of {cid}",
    }
    rec.update(extra)
    return rec


def probe(dim: int = DIM) -> list[float]:
    return [1.0 + i / 10 for i in range(dim)]


def memory_snapshot(store: Any, ids: list[str], dim: int = DIM) -> Any:
    """All observable state reachable from ``ids``: records (with revisions) and
    a full-store ranking for a fixed probe (scores rounded). Reads one id at a
    time so it works under any ``max_batch``."""
    records = [store.get(i) for i in sorted(set(ids))]
    rows = store.search(probe(dim), top_k=store.health()["max_top_k"])
    return records, [(r["chunk_id"], r["revision"], round(r["score"], 5)) for r in rows]


def affect_snapshot(store: Any, keys: list[str]) -> Any:
    current = [store.get(k) for k in sorted(set(keys))]
    histories = []
    for k in sorted(set(keys)):
        items: list[Any] = []
        page = store.history(k)
        items.extend(page["items"])
        while page["next_before_revision"] is not None:
            page = store.history(k, before_revision=page["next_before_revision"])
            items.extend(page["items"])
        histories.append(items)
    listing: list[Any] = []
    page = store.list()
    listing.extend(page["items"])
    while page["next_after_key"] is not None:
        page = store.list(after_key=page["next_after_key"])
        listing.extend(page["items"])
    return current, histories, listing


@contextlib.contextmanager
def rejects(
    exc: type[BifrostError], take: Callable[[], Any], match: str | None = None
) -> Iterator[None]:
    """The block raises ``exc`` and ``take()`` (a snapshot callable) is unchanged."""
    before = take()
    with pytest.raises(exc, match=match):
        yield
    after = take()
    assert after == before, "store state changed by a rejected call"
