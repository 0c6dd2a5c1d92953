"""Memory kit: describe_store, health and upsert_many (seed: fresh_db, caps,
basic_upsert, replay, conflict, optimistic_lock, injection_rule)."""

from __future__ import annotations

from typing import Any

import pytest

from bifrost.consumer.testing.conformance._helpers import (
    DIM,
    IDEMPOTENCY_TTLS,
    ManualClock,
    basis,
    chunk,
    ctx,
    ledger_lifetime,
    memory_snapshot,
    rejects,
    run_concurrently,
)
from bifrost.consumer.testing.conformance.memory_base import (
    CTX,
    V1_CAPS,
    MemoryKitBase,
    MemoryStoreFactory,
    seeded,
    up,
)
from bifrost.errors import IdempotencyConflict, InvalidArguments, RevisionMismatch
from bifrost.memory.protocol import MemoryDataStore


class MemoryUpsertTests(MemoryKitBase):
    # --- describe_store / health -------------------------------------------------
    def test_fresh_db_caps(self, store: MemoryDataStore) -> None:
        assert store.describe_store() == V1_CAPS
        assert store.search(basis(0), top_k=5) == []

    def test_caps_exact_types(self, store: MemoryDataStore) -> None:
        caps = store.describe_store()
        assert list(caps) == list(V1_CAPS)
        assert all(type(caps[k]) is type(V1_CAPS[k]) for k in V1_CAPS)

    def test_health(self, make_store: MemoryStoreFactory) -> None:
        s = make_store(embedding_dim=DIM, max_batch=7, max_top_k=9)
        assert s.health() == {
            "status": "ok",
            "plane": "memory",
            "embedding_dim": DIM,
            "distance": "cosine",
            "max_batch": 7,
            "max_top_k": 9,
            "max_page": 1000,
        }

    # --- upsert_many ----------------------------------------------------------------
    def test_basic_upsert(self, store: MemoryDataStore) -> None:
        recs = [
            chunk("c1", basis(0), {"tenant": "t"}, meta={"n": [1, 2.5, None, True]}),
            chunk("c2", basis(1), {}, distillate="d"),
        ]
        assert up(store, recs, "k1") == {"upserted": 2, "replayed": False}
        for rec in recs:
            assert store.get(rec["id"]) == {**rec, "revision": 1}

    def test_verbatim_round_trip(self, store: MemoryDataStore) -> None:
        rec = chunk(
            "ü/🦊 id",
            [0.1, 1e-300, -2.5, 3, 0, 0, 0, 123456789012345],
            {"agent_self": "x", "group": "g"},
            nested={"z": [{"deep": ["ñ", 0.1 + 0.2, -0.0, 2**62]}], "a": None},
            trust_tier="opaque",
            provenance={"source_role": "tool"},
            text='line1\nline2\t"quoted" \\ \u2028',
        )
        up(store, [rec], "k")
        got = store.get("ü/🦊 id")
        assert got == {**rec, "revision": 1}
        assert got is not None
        assert got["embedding"] == rec["embedding"]
        assert [type(x) for x in got["embedding"]] == [type(x) for x in rec["embedding"]]

    def test_id_fallbacks(self, store: MemoryDataStore) -> None:
        r1 = {"chunk_id": "via-chunk-id", "embedding": basis(0), "scope": {}}
        r2 = {"memory_id": "via-memory-id", "vector": basis(1), "scope": {}}
        assert up(store, [r1, r2], "k")["upserted"] == 2
        assert store.get("via-chunk-id") == {**r1, "revision": 1}
        assert store.get("via-memory-id") == {**r2, "revision": 1}
        rows = store.search(basis(1), top_k=1)
        assert rows[0]["chunk_id"] == "via-memory-id"

    def test_revision_increments(self, store: MemoryDataStore) -> None:
        for n in range(1, 4):
            up(store, [chunk("x", basis(n), {}, n=n)], f"k{n}")
            got = store.get("x")
            assert got is not None
            assert got["revision"] == n
            assert got["n"] == n

    def test_empty_batch_is_noop(self, store: MemoryDataStore) -> None:
        ids = seeded(store)
        before = memory_snapshot(store, ids)
        assert up(store, [], "empty") == {"upserted": 0, "replayed": False}
        assert memory_snapshot(store, ids) == before

    def test_replay(self, store: MemoryDataStore) -> None:
        recs = [chunk("r", basis(0), {})]
        assert up(store, recs, "same") == {"upserted": 1, "replayed": False}
        assert up(store, recs, "same") == {"upserted": 1, "replayed": True}
        got = store.get("r")
        assert got is not None
        assert got["revision"] == 1

    def test_replay_ignores_now_stale_expected_revisions(self, store: MemoryDataStore) -> None:
        recs = [chunk("r", basis(0), {})]
        assert up(store, recs, "k", expected_revisions={"r": 0})["replayed"] is False
        assert up(store, recs, "k", expected_revisions={"r": 0})["replayed"] is True
        got = store.get("r")
        assert got is not None
        assert got["revision"] == 1

    def test_conflict(self, store: MemoryDataStore) -> None:
        first = [chunk("c", basis(0), {}, v=1)]
        up(store, first, "key")
        ids = ["c", "c2"]
        with rejects(IdempotencyConflict, self.snap(store, ids)):
            up(store, [chunk("c2", basis(1), {})], "key")
        with rejects(IdempotencyConflict, self.snap(store, ids)):
            up(store, [chunk("c", basis(0), {}, v=2)], "key")
        with rejects(IdempotencyConflict, self.snap(store, ids)):
            up(store, first, "key", expected_revisions={"c": 0})
        assert store.get("c") == {**first[0], "revision": 1}

    def test_idempotency_is_actor_scoped(self, store: MemoryDataStore) -> None:
        up(store, [chunk("c", basis(0), {}, v=1)], "key", ctx=ctx("alice"))
        out = up(store, [chunk("c", basis(0), {}, v=2)], "key", ctx=ctx("bob"))
        assert out == {"upserted": 1, "replayed": False}
        got = store.get("c")
        assert got is not None
        assert (got["v"], got["revision"]) == (2, 2)
        # alice's entry is still hers: her replay replays, her new payload conflicts.
        again = up(store, [chunk("c", basis(0), {}, v=1)], "key", ctx=ctx("alice"))
        assert again["replayed"] is True
        with pytest.raises(IdempotencyConflict):
            up(store, [chunk("c", basis(0), {}, v=3)], "key", ctx=ctx("alice"))

    def test_idempotency_key_is_not_shared_across_records_payloads(
        self, store: MemoryDataStore
    ) -> None:
        up(store, [chunk("a", basis(0), {})], "k1")
        assert up(store, [chunk("a", basis(0), {})], "k2")["replayed"] is False
        got = store.get("a")
        assert got is not None
        assert got["revision"] == 2

    @pytest.mark.parametrize(("cls", "ttl"), IDEMPOTENCY_TTLS)
    def test_idempotency_ttl(
        self, make_store: MemoryStoreFactory, cls: str | None, ttl: int
    ) -> None:
        clock = ManualClock()
        s = make_store(embedding_dim=DIM, clock=clock)

        def write(i: int) -> Any:
            return up(s, [chunk("t", basis(i), {})], "k", idempotency_class=cls)

        ledger_lifetime(write, clock, ttl, first=0, other=1, after=0)
        got = s.get("t")
        assert got is not None
        assert got["revision"] == 2
        clock.advance(ttl + 1)
        out = up(s, [chunk("t", basis(2), {})], "k", idempotency_class=cls)
        assert out == {"upserted": 1, "replayed": False}

    def test_optimistic_lock(self, store: MemoryDataStore) -> None:
        up(store, [chunk("o", basis(0), {}, v=1)], "k1")
        ids = ["o", "new"]
        with rejects(RevisionMismatch, self.snap(store, ids)):
            up(
                store,
                [chunk("new", basis(1), {}), chunk("o", basis(0), {}, v=2)],
                "k2",
                expected_revisions={"o": 5},
            )
        with pytest.raises(RevisionMismatch) as info:
            up(store, [chunk("o", basis(0), {}, v=2)], "k3", expected_revisions={"o": 7})
        assert info.value.details == {"id": "o", "expected": 7, "actual": 1}
        out = up(store, [chunk("o", basis(0), {}, v=2)], "k4", expected_revisions={"o": 1})
        assert out["upserted"] == 1
        got = store.get("o")
        assert got is not None
        assert (got["v"], got["revision"]) == (2, 2)

    def test_expected_revision_zero_means_absent(self, store: MemoryDataStore) -> None:
        out = up(store, [chunk("z", basis(0), {})], "k1", expected_revisions={"z": 0})
        assert out == {"upserted": 1, "replayed": False}
        with rejects(RevisionMismatch, self.snap(store, ["z"])):
            up(store, [chunk("z", basis(1), {})], "k2", expected_revisions={"z": 0})
        with pytest.raises(RevisionMismatch) as info:
            up(store, [chunk("z", basis(1), {})], "k3", expected_revisions={"z": 0})
        assert info.value.details == {"id": "z", "expected": 0, "actual": 1}

    def test_expected_revision_on_absent_id(self, store: MemoryDataStore) -> None:
        with rejects(RevisionMismatch, self.snap(store, ["n"])):
            up(store, [chunk("n", basis(0), {})], "k", expected_revisions={"n": 3})

    def test_failed_call_does_not_consume_key(self, store: MemoryDataStore) -> None:
        with pytest.raises(RevisionMismatch):
            up(store, [chunk("n", basis(0), {})], "k", expected_revisions={"n": 3})
        assert up(store, [chunk("n", basis(0), {})], "k")["replayed"] is False

    @pytest.mark.parametrize(
        "expected",
        [
            [],
            "x",
            {"not-in-batch": 1},
            {"e": -1},
            {"e": True},
            {"e": 1.0},
            {"e": "1"},
            {"e": None},
        ],
    )
    def test_expected_revisions_shape(self, store: MemoryDataStore, expected: Any) -> None:
        ids = [*seeded(store), "e"]
        with rejects(InvalidArguments, self.snap(store, ids)):
            up(store, [chunk("e", basis(2), {})], "k", expected_revisions=expected)

    def test_injection_rule(self, store: MemoryDataStore) -> None:
        ids = [*seeded(store), "i"]
        with rejects(InvalidArguments, self.snap(store, ids)):
            up(store, [chunk("i", basis(0), {}, origin="injected_context")], "k1")
        with rejects(InvalidArguments, self.snap(store, ids)):
            up(
                store,
                [chunk("i", basis(0), {}, origin="injected_context", injection_source=None)],
                "k2",
            )
        with rejects(InvalidArguments, self.snap(store, ids)):
            up(store, [chunk("i", basis(0), {}, origin="user", injection_source="tool")], "k3")
        with rejects(InvalidArguments, self.snap(store, ids)):
            up(store, [chunk("i", basis(0), {}, injection_source="tool")], "k4")
        ok = chunk("i", basis(0), {}, origin="injected_context", injection_source="tool")
        assert up(store, [ok], "k5")["upserted"] == 1
        plain = chunk("j", basis(1), {}, origin="user")
        assert up(store, [plain], "k6")["upserted"] == 1

    def test_reserved_revision(self, store: MemoryDataStore) -> None:
        ids = [*seeded(store), "r"]
        with rejects(InvalidArguments, self.snap(store, ids)):
            up(store, [chunk("r", basis(0), {}, revision=1)], "k")

    @pytest.mark.parametrize(
        "bad",
        [
            {"embedding": basis(0), "scope": {}},  # no id
            {"id": "", "embedding": basis(0), "scope": {}},
            {"id": 7, "embedding": basis(0), "scope": {}},
            {"id": "x" * 513, "embedding": basis(0), "scope": {}},
            {"id": "é" * 257, "embedding": basis(0), "scope": {}},  # 514 bytes UTF-8
            {"id": "x", "scope": {}},  # no embedding
            {"id": "x", "embedding": basis(0)[:-1], "scope": {}},
            {"id": "x", "embedding": [*basis(0), 0.0], "scope": {}},
            {"id": "x", "embedding": [True, *basis(0)[1:]], "scope": {}},
            {"id": "x", "embedding": ["1", *basis(0)[1:]], "scope": {}},
            {"id": "x", "embedding": [None, *basis(0)[1:]], "scope": {}},
            {"id": "x", "embedding": [float("nan"), *basis(0)[1:]], "scope": {}},
            {"id": "x", "embedding": [float("inf"), *basis(0)[1:]], "scope": {}},
            {"id": "x", "embedding": [10**400, *basis(0)[1:]], "scope": {}},
            {"id": "x", "embedding": [0.0] * DIM, "scope": {}},
            {"id": "x", "embedding": {"0": 1.0}, "scope": {}},
            {"id": "x", "embedding": "1,0,0", "scope": {}},
            {"id": "x", "embedding": basis(0)},  # no scope
            {"id": "x", "embedding": basis(0), "scope": None},
            {"id": "x", "embedding": basis(0), "scope": ["tenant"]},
            {"id": "x", "embedding": basis(0), "scope": {"planet": "earth"}},
            {"id": "x", "embedding": basis(0), "scope": {"tenant": ""}},
            {"id": "x", "embedding": basis(0), "scope": {"tenant": 3}},
            {"id": "x", "embedding": basis(0), "scope": {"tenant": {"a": "b"}}},
            {"id": "x", "embedding": basis(0), "scope": {}, "blob": float("nan")},
        ],
    )
    def test_invalid_record_rejected(self, store: MemoryDataStore, bad: dict[str, Any]) -> None:
        ids = [*seeded(store), "x"]
        good = chunk("good", basis(3), {})
        with rejects(InvalidArguments, self.snap(store, [*ids, "good"])):
            up(store, [good, bad], "k")

    @pytest.mark.parametrize("records", [None, {}, "records", [1], [[]], [None]])
    def test_invalid_records_container(self, store: MemoryDataStore, records: Any) -> None:
        ids = seeded(store)
        with rejects(InvalidArguments, self.snap(store, ids)):
            up(store, records, "k")

    def test_duplicate_ids_in_batch(self, store: MemoryDataStore) -> None:
        ids = [*seeded(store), "d"]
        with rejects(InvalidArguments, self.snap(store, ids)):
            up(store, [chunk("d", basis(0), {}), chunk("d", basis(1), {})], "k")
        with rejects(InvalidArguments, self.snap(store, ids)):
            up(
                store,
                [chunk("d", basis(0), {}), {"chunk_id": "d", "embedding": basis(1), "scope": {}}],
                "k",
            )

    def test_max_batch(self, make_store: MemoryStoreFactory) -> None:
        s = make_store(embedding_dim=DIM, max_batch=3)
        recs = [chunk(f"m{i}", basis(i), {}) for i in range(4)]
        ids = [r["id"] for r in recs]
        with rejects(InvalidArguments, self.snap(s, ids)):
            up(s, recs, "k1")
        assert up(s, recs[:3], "k2")["upserted"] == 3

    @pytest.mark.parametrize("key", [None, "", 5, "k" * 257])
    def test_idempotency_key_rules(self, store: MemoryDataStore, key: Any) -> None:
        ids = [*seeded(store), "n"]
        with rejects(InvalidArguments, self.snap(store, ids)):
            store.upsert_many([chunk("n", basis(0), {})], idempotency_key=key, ctx=CTX)

    def test_idempotency_key_256_chars_ok(self, store: MemoryDataStore) -> None:
        assert up(store, [chunk("n", basis(0), {})], "k" * 256)["upserted"] == 1

    @pytest.mark.parametrize("cls", ["", "forever", "DEFAULT", 1])
    def test_idempotency_class_rules(self, store: MemoryDataStore, cls: Any) -> None:
        ids = [*seeded(store), "n"]
        with rejects(InvalidArguments, self.snap(store, ids)):
            up(store, [chunk("n", basis(0), {})], "k", idempotency_class=cls)

    def test_caller_mutation_does_not_leak(self, store: MemoryDataStore) -> None:
        rec = chunk("m", basis(0), {"tenant": "t"}, meta={"x": 1})
        up(store, [rec], "k")
        rec["meta"]["x"] = 2
        rec["scope"]["tenant"] = "other"
        got = store.get("m")
        assert got is not None
        assert got["meta"] == {"x": 1}
        assert got["scope"] == {"tenant": "t"}
        got["meta"]["x"] = 3
        again = store.get("m")
        assert again is not None
        assert again["meta"] == {"x": 1}

    def test_concurrent_upserts(self, store: MemoryDataStore) -> None:
        def work(t: int) -> None:
            for i in range(20):
                up(
                    store,
                    [chunk("shared", basis(i), {}), chunk(f"t{t}-{i}", basis(t), {})],
                    f"{t}-{i}",
                )

        assert run_concurrently(work) == []
        got = store.get("shared")
        assert got is not None
        assert got["revision"] == 80
        assert len(store.get_many([f"t{t}-{i}" for t in range(4) for i in range(20)])) == 80
