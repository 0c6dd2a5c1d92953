"""Memory kit: get / get_many / delete_many (seed: get_hit, get_absent,
get_many, delete_hit, delete_absent), dispatch shapes and parity_vs_reference."""

from __future__ import annotations

from typing import Any

import pytest

from bifrost.consumer.testing.conformance._helpers import DIM, basis, chunk, ctx, rejects
from bifrost.consumer.testing.conformance.memory_base import (
    MemoryKitBase,
    MemoryStoreFactory,
    seeded,
    up,
)
from bifrost.consumer.testing.conformance.parity import run_parity
from bifrost.consumer.testing.memory_store import InMemoryMemoryStore
from bifrost.errors import InvalidArguments
from bifrost.memory.dispatch import dispatch_memory_call
from bifrost.memory.protocol import MemoryDataStore


def env(verb: str, args: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "wire_version": "0.6",
        "call_id": f"call-{verb}",
        "verb": verb,
        "args": args or {},
        **extra,
    }


class MemoryReadTests(MemoryKitBase):
    def test_get_hit(self, store: MemoryDataStore) -> None:
        rec = chunk("h", basis(0), {"group": "g"}, distillate="d", extra=[1, {"a": "b"}])
        up(store, [rec], "k")
        assert store.get("h") == {**rec, "revision": 1}

    def test_get_absent(self, store: MemoryDataStore) -> None:
        assert store.get("nope") is None
        seeded(store)
        assert store.get("nope") is None

    @pytest.mark.parametrize("bad", ["", 3, None, "x" * 513])
    def test_get_invalid_id(self, store: MemoryDataStore, bad: Any) -> None:
        with pytest.raises(InvalidArguments):
            store.get(bad)

    def test_get_many(self, store: MemoryDataStore) -> None:
        a, b = (chunk(c, basis(i), {}) for i, c in enumerate(("a", "b")))
        up(store, [a, b], "k")
        assert store.get_many(["a", "absent"]) == [{**a, "revision": 1}]
        assert store.get_many(["b", "absent", "a", "b", "a"]) == [
            {**b, "revision": 1},
            {**a, "revision": 1},
        ]
        assert store.get_many([]) == []

    @pytest.mark.parametrize("ids", [None, "a", [1], [""], ["a", None], {"a": 1}])
    def test_get_many_invalid(self, store: MemoryDataStore, ids: Any) -> None:
        seeded(store)
        with pytest.raises(InvalidArguments):
            store.get_many(ids)

    def test_get_many_max_batch(self, make_store: MemoryStoreFactory) -> None:
        s = make_store(embedding_dim=DIM, max_batch=3)
        seeded(s)
        assert len(s.get_many(["a", "b", "a"])) == 2
        with pytest.raises(InvalidArguments):
            s.get_many(["a", "b", "c", "d"])

    def test_delete_hit(self, store: MemoryDataStore) -> None:
        seeded(store)
        assert store.delete_many(["a"]) == {"deleted": 1}
        assert store.get("a") is None
        assert store.get("b") is not None
        assert [r["chunk_id"] for r in store.search(basis(0), top_k=10)] == ["b"]

    def test_delete_absent(self, store: MemoryDataStore) -> None:
        assert store.delete_many(["ghost"]) == {"deleted": 0}
        seeded(store)
        assert store.delete_many(["ghost"]) == {"deleted": 0}
        assert store.delete_many([]) == {"deleted": 0}
        assert len(store.get_many(["a", "b"])) == 2

    def test_delete_counts_distinct_existing(self, store: MemoryDataStore) -> None:
        seeded(store)
        assert store.delete_many(["a", "a", "ghost", "b", "b"]) == {"deleted": 2}
        assert store.search(basis(0), top_k=10) == []

    @pytest.mark.parametrize("ids", [None, "a", [1], [""], ["a", None]])
    def test_delete_invalid(self, store: MemoryDataStore, ids: Any) -> None:
        seeded(store)
        with rejects(InvalidArguments, self.snap(store, ["a", "b"])):
            store.delete_many(ids)

    def test_delete_max_batch(self, make_store: MemoryStoreFactory) -> None:
        s = make_store(embedding_dim=DIM, max_batch=3)
        seeded(s)
        with rejects(InvalidArguments, self.snap(s, ["a", "b"])):
            s.delete_many(["a", "b", "c", "d"])

    def test_reinsert_after_delete_starts_over(self, store: MemoryDataStore) -> None:
        seeded(store)
        up(store, [chunk("a", basis(0), {}, v=2)], "k2")
        store.delete_many(["a"])
        up(store, [chunk("a", basis(2), {}, v=3)], "k3", expected_revisions={"a": 0})
        got = store.get("a")
        assert got is not None
        assert (got["revision"], got["v"]) == (1, 3)
        assert store.search(basis(2), top_k=1)[0]["chunk_id"] == "a"

    def test_dispatch_shapes(self, store: MemoryDataStore) -> None:
        c = ctx()
        rec = chunk("w", basis(0), {"tenant": "t"})
        out = dispatch_memory_call(
            store, env("upsert_many", {"records": [rec]}, idempotency_key="k"), c
        )
        assert out == {"upserted": 1, "replayed": False}
        assert dispatch_memory_call(store, env("get", {"chunk_id": "w"}), c) == {
            **rec,
            "revision": 1,
        }
        rows = dispatch_memory_call(store, env("search", {"vector": basis(0), "top_k": 1}), c)
        assert [r["chunk_id"] for r in rows] == ["w"]
        assert dispatch_memory_call(store, env("describe_store"), c) == store.describe_store()
        assert dispatch_memory_call(store, env("health"), c) == store.health()
        assert dispatch_memory_call(store, env("delete_many", {"ids": ["w"]}), c) == {"deleted": 1}

    def test_parity_vs_reference(self, make_store: MemoryStoreFactory) -> None:
        c = ctx(scope={"tenant": "t"})
        recs = [
            chunk(
                f"p{i}",
                [((i * 7 + j * 3) % 11) - 5.0 for j in range(DIM)],
                {"tenant": "t", "end_user": f"u{i % 3}"},
                distillate=f"d{i}",
            )
            for i in range(1, 13)
        ]
        q = [1.0, -2.0, 0.5, 3.0, 0.0, 1.0, -1.0, 2.0]
        envelopes = [
            env("describe_store"),
            env("health"),
            env("upsert_many", {"records": recs[:6]}, idempotency_key="k1"),
            env("upsert_many", {"records": recs[:6]}, idempotency_key="k1"),
            env("upsert_many", {"records": recs[6:]}, idempotency_key="k1"),
            env("upsert_many", {"records": recs[6:]}, idempotency_key="k2"),
            env(
                "upsert_many",
                {"records": recs[:1], "expected_revisions": {"p1": 4}},
                idempotency_key="k3",
            ),
            env(
                "upsert_many",
                {"records": [{**recs[0], "scope": {"tenant": "x"}}]},
                idempotency_key="k4",
            ),
            env("search", {"vector": q, "top_k": 5}),
            env("search", {"vector": q, "top_k": 20, "scope_any": [{"end_user": "u1"}]}),
            env("search", {"vector": q, "top_k": 3, "include": {"embedding": False}}),
            env("search", {"vector": q, "top_k": 3, "scope_all": {"planet": "x"}}),
            env("search", {"vector": q, "top_k": 3, "metadata_filter": {"a": 1}}),
            env("search", {"vector": q[:3], "top_k": 3}),
            env("get", {"chunk_id": "p3"}),
            env("get", {"chunk_id": "nope"}),
            env("get_many", {"ids": ["p2", "nope", "p1", "p2"]}),
            env("delete_many", {"ids": ["p1", "p2", "nope"]}),
            env("get_many", {"ids": ["p1", "p2", "p3"]}),
            env("scan"),
            env("frobnicate"),
        ]
        run_parity(make_store(embedding_dim=DIM), InMemoryMemoryStore(DIM), envelopes, c)
