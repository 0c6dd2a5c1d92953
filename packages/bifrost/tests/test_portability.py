"""bifrost.portability's import loop against a store's transaction object: what it asks
the store for, what it tells the store to write, and when it writes nothing at all."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from bifrost.portability import (
    HeldChunk,
    History,
    ImportConflict,
    ImportedChunks,
    ImportedKeys,
    ImportPlan,
    import_chunk_batch,
    import_key_batch,
    validate_chunk_import,
    validate_key_import,
)

STAMP = "2026-01-01T00:00:00.000000Z"


def chunk(cid: str, tenant: str = "t", n: int = 1) -> dict[str, Any]:
    return {"id": cid, "embedding": [1.0, 0.0], "scope": {"tenant": tenant}, "n": n}


def chunks(*entries: tuple[dict[str, Any], int, float]) -> ImportedChunks:
    return validate_chunk_import(
        [{"record": r, "revision": rev, "written_at": at} for r, rev, at in entries],
        embedding_dim=2,
        max_batch=10,
    )


class ChunkTx:
    def __init__(self, held: Mapping[str, HeldChunk], cutoff: float | None = None) -> None:
        self._held = dict(held)
        self._cutoff = cutoff
        self.asked: list[str] = []
        self.plans: list[ImportPlan] = []

    def cutoff(self) -> float | None:
        return self._cutoff

    def held(self, ids: Sequence[str]) -> Mapping[str, HeldChunk]:
        self.asked += ids
        return {i: self._held[i] for i in ids if i in self._held}

    def write(self, batch: ImportedChunks, plan: ImportPlan) -> None:
        self.plans.append(plan)


def test_chunks_new_same_replaced_and_expired() -> None:
    held = {
        "same": HeldChunk(chunk("same"), 3, 50.0),
        "other": HeldChunk(chunk("other", n=2), 4, 50.0),
        "gone": HeldChunk(chunk("gone", tenant="u"), 9, 5.0),  # expired: absent
    }
    tx = ChunkTx(held, cutoff=10.0)
    batch = chunks(
        (chunk("new"), 2, 50.0),
        (chunk("same"), 3, 50.0),
        (chunk("other"), 1, 50.0),
        (chunk("old"), 1, 1.0),  # already expired under the destination's retention
        (chunk("gone"), 2, 50.0),
    )
    outcome = import_chunk_batch(tx, batch, "replace")
    assert tx.asked == ["new", "same", "other", "old", "gone"]
    [plan] = tx.plans
    assert (plan.new, sorted(plan.over)) == ([0], [2, 4])
    # The replaced chunk is numbered above what it overwrites; the expired one keeps its own.
    assert plan.revisions == {0: 2, 2: 5, 4: 2}
    assert (outcome.written, outcome.skipped, outcome.replaced, outcome.expired) == (2, 1, 1, 1)


def test_chunks_nothing_to_write_and_a_conflict_write_nothing() -> None:
    tx = ChunkTx({"a": HeldChunk(chunk("a"), 1, 50.0)})
    assert import_chunk_batch(tx, chunks((chunk("a"), 1, 50.0)), "fail").skipped == 1
    with pytest.raises(ImportConflict) as caught:
        import_chunk_batch(tx, chunks((chunk("b"), 1, 50.0), (chunk("a", n=2), 1, 50.0)), "fail")
    assert caught.value.index == 1
    assert tx.plans == []


class KeyTx:
    def __init__(self, held: Mapping[str, History]) -> None:
        self._held = dict(held)
        self.plans: list[ImportPlan] = []

    def held(self, keys: Sequence[str]) -> Mapping[str, History]:
        return {k: self._held[k] for k in keys if k in self._held}

    def write(self, batch: ImportedKeys, plan: ImportPlan) -> None:
        self.plans.append(plan)


def affect(key: str, tenant: str = "t", mood: str = "calm") -> dict[str, Any]:
    return {"key": key, "scope": {"tenant": tenant}, "state": {"mood": mood}}


def keys(*entries: tuple[str, list[dict[str, Any]]]) -> ImportedKeys:
    return validate_key_import(
        [
            {
                "key": key,
                "revision": len(records),
                "history": [
                    {"record": r, "revision": j + 1, "recorded_at": STAMP}
                    for j, r in enumerate(records)
                ],
            }
            for key, records in entries
        ],
        max_batch=10,
    )


def test_keys_same_history_skipped_and_a_rescope_replaced_above() -> None:
    tx = KeyTx(
        {
            "same": ((1, affect("same"), STAMP),),
            "moved": ((1, affect("moved", tenant="u"), STAMP), (2, affect("moved"), STAMP)),
        }
    )
    batch = keys(("same", [affect("same")]), ("moved", [affect("moved")]), ("new", [affect("new")]))
    outcome = import_key_batch(tx, batch, "replace", allow_scope_change=False)
    [plan] = tx.plans
    # "moved" is held in tenant t (its newest revision): no scope change, numbered above 2.
    assert (plan.new, plan.over, plan.revisions) == ([2], [1], {2: 1, 1: 3})
    assert (outcome.written, outcome.skipped, outcome.replaced) == (1, 1, 1)
