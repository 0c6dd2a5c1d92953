"""The conformance kit catches broken stores (its tests can fail)."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from bifrost.consumer.testing import InMemoryAffectStore, InMemoryMemoryStore
from bifrost.consumer.testing.conformance import (
    AFFECT_KEYS,
    MEMORY_DIM,
    AffectStoreConformance,
    ManualClock,
    MemoryStoreConformance,
    affect_envelope,
    memory_workload,
    run_affect_parity,
    run_parity,
)
from bifrost.context import DispatchContext
from bifrost.errors import RevisionMismatch

KIT_FAILURE = (AssertionError, pytest.fail.Exception)


class ScopeBlind(InMemoryMemoryStore):
    """Ignores the scope filter entirely."""

    def search(self, vector: list[float], **kw: Any) -> list[dict[str, Any]]:
        kw.pop("scope_all", None)
        kw.pop("scope_any", None)
        return super().search(vector, **kw)


class PostFilter(InMemoryMemoryStore):
    """Takes the top_k first, then filters by scope (returns too few)."""

    def search(self, vector: list[float], **kw: Any) -> list[dict[str, Any]]:
        top_k = kw.pop("top_k")
        all_ = kw.pop("scope_all", None) or {}
        rows = super().search(vector, top_k=top_k, **{**kw, "scope_all": None})
        return [r for r in rows if all(r["chunk"]["scope"].get(k) == v for k, v in all_.items())]


class NoReplay(InMemoryMemoryStore):
    """Forgets idempotency keys: every call writes."""

    def upsert_many(self, records: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
        kw["idempotency_key"] = f"{kw['idempotency_key']}-{id(object())}-{len(self._chunks)}"
        return super().upsert_many(records, **kw)


class PartialBatch(InMemoryMemoryStore):
    """Writes record by record, so a late RevisionMismatch leaves earlier writes."""

    def upsert_many(self, records: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
        expected = kw.pop("expected_revisions", None) or {}
        for i, rec in enumerate(records):
            cid = str(rec.get("id"))
            if cid in expected:
                cur = self._chunks.get(cid)
                actual = cur.revision if cur else 0
                if actual != expected[cid]:
                    raise RevisionMismatch(cid, expected[cid], actual)
            super().upsert_many([rec], **{**kw, "idempotency_key": f"{kw['idempotency_key']}#{i}"})
        return {"upserted": len(records), "replayed": False}


class LeakyDelete(InMemoryMemoryStore):
    """Reports deletes but keeps the chunks searchable."""

    def delete_many(
        self, ids: list[str], *, grant: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        return {"deleted": len({i for i in ids if i in self._chunks})}


class OldestFirst(InMemoryAffectStore):
    def history(self, key: str, **kw: Any) -> dict[str, Any]:
        page = super().history(key, **kw)
        return {**page, "items": list(reversed(page["items"]))}


class NoRecordedAt(InMemoryAffectStore):
    """Drops the server-assigned timestamp on reads."""

    def get(self, key: str) -> dict[str, Any] | None:
        got = super().get(key)
        if got is not None:
            got.pop("recorded_at")
        return got


def memory_factory(cls: type[InMemoryMemoryStore]) -> Callable[..., InMemoryMemoryStore]:
    def make(*, embedding_dim: int = 8, **kw: Any) -> InMemoryMemoryStore:
        return cls(embedding_dim, **kw)

    return make


@pytest.mark.parametrize(
    ("cls", "test"),
    [
        (ScopeBlind, "test_scope_isolation"),
        (ScopeBlind, "test_scope_any_union"),
        (PostFilter, "test_scope_isolation"),
        (NoReplay, "test_replay"),
        (PartialBatch, "test_optimistic_lock"),
        (LeakyDelete, "test_delete_hit"),
    ],
)
def test_memory_kit_catches(cls: type[InMemoryMemoryStore], test: str) -> None:
    kit = MemoryStoreConformance()
    store = cls(8)
    with pytest.raises(KIT_FAILURE):
        getattr(kit, test)(store)
    # ...while the reference passes the very same test.
    getattr(kit, test)(InMemoryMemoryStore(8))


def test_affect_kit_catches() -> None:
    kit = AffectStoreConformance()
    with pytest.raises(KIT_FAILURE):
        kit.test_history_newest_first_and_paging(OldestFirst())
    kit.test_history_newest_first_and_paging(InMemoryAffectStore())

    def make(**kw: Any) -> InMemoryAffectStore:
        return NoRecordedAt(**kw)

    with pytest.raises(KIT_FAILURE):
        kit.test_put_and_get(make)


def test_parity_catches_divergence() -> None:
    recs = [{"id": f"c{i}", "embedding": [float(i + 1), 1.0], "scope": {}} for i in range(3)]
    envs = [
        {
            "wire_version": "0.6",
            "call_id": "1",
            "verb": "upsert_many",
            "idempotency_key": "k",
            "args": {"records": recs},
        },
        {
            "wire_version": "0.6",
            "call_id": "2",
            "verb": "upsert_many",
            "idempotency_key": "k",
            "args": {"records": recs},
        },
    ]
    ctx = DispatchContext(actor="a")
    run_parity(InMemoryMemoryStore(2), InMemoryMemoryStore(2), copy.deepcopy(envs), ctx)
    with pytest.raises(AssertionError, match="replayed"):
        run_parity(NoReplay(2), InMemoryMemoryStore(2), envs, ctx)


@pytest.mark.parametrize("grant", [{}, {"tenant": "t1"}])
def test_memory_workload_catches_a_store_that_forgets_keys(grant: dict[str, str]) -> None:
    ctx = DispatchContext(actor="a", scope=grant, plane="memory")
    envs = memory_workload(random.Random(3), 150, grant)
    assert envs == memory_workload(random.Random(3), 150, grant)  # a seed is a sequence
    verbs = {e["verb"] for e in envs}
    assert verbs == {"upsert_many", "search", "get", "get_many", "delete_many"}
    ids = {r["id"] for e in envs if e["verb"] == "upsert_many" for r in e["args"]["records"]}
    assert any("\x00" in i for i in ids) and any(not i.isascii() for i in ids)
    run_parity(InMemoryMemoryStore(MEMORY_DIM), InMemoryMemoryStore(MEMORY_DIM), envs, ctx)
    with pytest.raises(AssertionError):
        run_parity(NoReplay(MEMORY_DIM), InMemoryMemoryStore(MEMORY_DIM), envs, ctx)


@pytest.mark.parametrize("broken", [OldestFirst, NoRecordedAt])
def test_affect_workload_catches_a_broken_store(broken: type[InMemoryAffectStore]) -> None:
    kinds = run_affect_parity(
        InMemoryAffectStore(max_batch=5, max_page=5, clock=(c := ManualClock())),
        InMemoryAffectStore(max_batch=5, max_page=5, clock=c),
        random.Random(1),
        c,
    )
    assert {"ok", "InvalidArguments", "Forbidden"} <= kinds
    clock = ManualClock()
    with pytest.raises(AssertionError):
        run_affect_parity(
            broken(max_batch=5, max_page=5, clock=clock),
            InMemoryAffectStore(max_batch=5, max_page=5, clock=clock),
            random.Random(1),
            clock,
        )


def test_affect_envelopes_cover_every_verb_and_odd_keys() -> None:
    rng = random.Random(0)
    envs = [affect_envelope(rng, n) for n in range(2_000)]
    assert {e["verb"] for e in envs} == {
        "put_many",
        "get",
        "get_many",
        "history",
        "list",
        "delete_many",
        "describe_store",
        "health",
    }
    assert "\x00" in AFFECT_KEYS and "\x01" in AFFECT_KEYS
