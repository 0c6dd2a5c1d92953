"""The seed contract's TESTS entries, against the SQLite store (``:memory:`` and a file)."""

from __future__ import annotations

import hashlib
import json
import math
import struct
from pathlib import Path

import pytest

from bifrost.context import DispatchContext
from bifrost.errors import IdempotencyConflict, InvalidArguments, InvalidFilter, RevisionMismatch
from bifrost.memory.validation import DEFAULT_MAX_BATCH, DEFAULT_MAX_TOP_K
from bifrost.scope import DEFAULT_MAX_SCOPE_ANY
from ratatoskr.memory import MemoryLimits, RatatoskrMemoryStore, open_memory_store
from ratatoskr.memory.changes import DEFAULT_TOMBSTONE_RETENTION
from ratatoskr.memory.schema import migrations
from ratatoskr.sqlite import SchemaMismatch

from .conftest import DIM, chunk, vec

V1_CAPS = {
    "relational_edges_supported": False,
    "optimistic_locking_supported": True,
    "atomic_supersede_supported": False,
    "transaction_supported": False,
    "filterable_metadata_fields": [],
}


def test_fresh_db(store: RatatoskrMemoryStore) -> None:
    assert store.describe_store() == V1_CAPS
    with store.database.read() as conn:
        for table in ("memory_chunks", "memory_vec", "memory_idempotency"):
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchall() == [(0,)]


def test_reopen(db_file: str, ctx: DispatchContext) -> None:
    s = open_memory_store(db_file, embedding_dim=DIM)
    s.upsert_many([chunk("a", 1)], idempotency_key="k", ctx=ctx)
    s.close()
    s = open_memory_store(db_file, embedding_dim=DIM)
    assert s.get("a") is not None
    assert s.database.schema_version() == len(migrations(DIM))
    assert s.search(vec(1), top_k=1)[0]["chunk_id"] == "a"
    s.close()


def test_reopen_with_other_dimension_is_refused_untouched(
    db_file: str, ctx: DispatchContext
) -> None:
    s = open_memory_store(db_file, embedding_dim=DIM)
    s.upsert_many([chunk("a", 1)], idempotency_key="k", ctx=ctx)
    s.close()
    before = hashlib.sha256(Path(db_file).read_bytes()).hexdigest()
    with pytest.raises(SchemaMismatch) as info:
        open_memory_store(db_file, embedding_dim=16)
    assert "embedding_dim=8" in str(info.value)
    assert "embedding_dim=16" in str(info.value)
    assert hashlib.sha256(Path(db_file).read_bytes()).hexdigest() == before


@pytest.mark.parametrize("dim", [0, -1, True, 1.5])
def test_bad_dimension_is_refused(dim: object) -> None:
    with pytest.raises(InvalidArguments):
        open_memory_store(":memory:", embedding_dim=dim)  # type: ignore[arg-type]


def test_caps(store: RatatoskrMemoryStore) -> None:
    assert store.describe_store() == V1_CAPS
    health = store.health()
    assert health == {
        "status": "ok",
        "plane": "memory",
        "embedding_dim": DIM,
        "distance": "cosine",
        "max_batch": 1000,
        "max_top_k": 1000,
    }


def test_basic_upsert(store: RatatoskrMemoryStore, ctx: DispatchContext) -> None:
    records = [chunk("a", 1, trust_tier=2, nested={"x": [1, 2.5, None]}), chunk("b", 2)]
    assert store.upsert_many(records, idempotency_key="k", ctx=ctx) == {
        "upserted": 2,
        "replayed": False,
    }
    for rec in records:
        assert store.get(rec["id"]) == {**rec, "revision": 1}


def test_replay(store: RatatoskrMemoryStore, ctx: DispatchContext) -> None:
    records = [chunk("a", 1)]
    store.upsert_many(records, idempotency_key="k", ctx=ctx)
    again = store.upsert_many(records, idempotency_key="k", ctx=ctx)
    assert again == {"upserted": 1, "replayed": True}
    got = store.get("a")
    assert got is not None
    assert got["revision"] == 1


def test_replay_is_actor_scoped(store: RatatoskrMemoryStore, ctx: DispatchContext) -> None:
    store.upsert_many([chunk("a", 1)], idempotency_key="k", ctx=ctx)
    other = DispatchContext(actor="agent-2")
    assert store.upsert_many([chunk("a", 1)], idempotency_key="k", ctx=other)["replayed"] is False
    got = store.get("a")
    assert got is not None
    assert got["revision"] == 2


def test_conflict(store: RatatoskrMemoryStore, ctx: DispatchContext) -> None:
    store.upsert_many([chunk("a", 1)], idempotency_key="k", ctx=ctx)
    with pytest.raises(IdempotencyConflict):
        store.upsert_many([chunk("a", 2)], idempotency_key="k", ctx=ctx)
    assert store.get("a") == {**chunk("a", 1), "revision": 1}


def test_optimistic_lock(store: RatatoskrMemoryStore, ctx: DispatchContext) -> None:
    store.upsert_many([chunk("a", 1)], idempotency_key="k1", ctx=ctx)
    store.upsert_many([chunk("a", 2)], idempotency_key="k2", ctx=ctx, expected_revisions={"a": 1})
    with pytest.raises(RevisionMismatch) as info:
        store.upsert_many(
            [chunk("a", 3), chunk("b", 4)],
            idempotency_key="k3",
            ctx=ctx,
            expected_revisions={"a": 1},
        )
    assert info.value.details == {"id": "a", "expected": 1, "actual": 2}
    assert store.get("b") is None
    assert store.get("a") == {**chunk("a", 2), "revision": 2}
    # The failed key was not recorded: retrying it with a correct expectation works.
    store.upsert_many([chunk("a", 3)], idempotency_key="k3", ctx=ctx, expected_revisions={"a": 2})


def test_expected_zero_means_must_not_exist(
    store: RatatoskrMemoryStore, ctx: DispatchContext
) -> None:
    store.upsert_many([chunk("a", 1)], idempotency_key="k1", ctx=ctx, expected_revisions={"a": 0})
    with pytest.raises(RevisionMismatch):
        store.upsert_many(
            [chunk("a", 1)], idempotency_key="k2", ctx=ctx, expected_revisions={"a": 0}
        )


def test_injection_rule(store: RatatoskrMemoryStore, ctx: DispatchContext) -> None:
    with pytest.raises(InvalidArguments):
        store.upsert_many([chunk("a", 1, origin="injected_context")], idempotency_key="k", ctx=ctx)
    with pytest.raises(InvalidArguments):
        store.upsert_many([chunk("a", 1, injection_source="tool")], idempotency_key="k", ctx=ctx)
    assert store.get("a") is None
    store.upsert_many(
        [chunk("a", 1, origin="injected_context", injection_source="tool")],
        idempotency_key="k",
        ctx=ctx,
    )
    assert store.get("a") is not None


def test_basic_search(store: RatatoskrMemoryStore, ctx: DispatchContext) -> None:
    records = [chunk("a", 1, distillate="short a"), chunk("b", 2), chunk("c", 3)]
    store.upsert_many(records, idempotency_key="k", ctx=ctx)
    rows = store.search(vec(1), top_k=2)
    assert len(rows) == 2
    assert rows[0]["chunk_id"] == "a"
    assert math.isclose(rows[0]["score"], 1.0, abs_tol=1e-9)
    assert rows[0]["recalled_view"] == "short a"
    assert rows[0]["chunk"] == records[0]
    assert rows[0]["revision"] == 1
    assert rows[1]["recalled_view"] == rows[1]["chunk"]
    assert rows[0]["score"] >= rows[1]["score"]


def test_include_embedding_false(store: RatatoskrMemoryStore, ctx: DispatchContext) -> None:
    store.upsert_many([chunk("a", 1)], idempotency_key="k", ctx=ctx)
    row = store.search(vec(1), top_k=1, include={"embedding": False})[0]
    assert "embedding" not in row["chunk"]
    got = store.get("a")
    assert got is not None
    assert "embedding" in got


def test_scope_isolation(store: RatatoskrMemoryStore, ctx: DispatchContext) -> None:
    # Every out-of-scope chunk scores higher than the in-scope ones.
    others = [chunk(f"o{i}", 1, scope={"tenant": "other"}) for i in range(50)]
    mine = [chunk(f"m{i}", 100 + i, scope={"tenant": "mine"}) for i in range(3)]
    store.upsert_many(others + mine, idempotency_key="k", ctx=ctx)
    rows = store.search(vec(1), top_k=3, scope_all={"tenant": "mine"})
    assert sorted(r["chunk_id"] for r in rows) == ["m0", "m1", "m2"]
    assert all(r["chunk"]["scope"] == {"tenant": "mine"} for r in rows)


def test_scope_any_union(store: RatatoskrMemoryStore, ctx: DispatchContext) -> None:
    store.upsert_many(
        [
            chunk("subject", 1, scope={"tenant": "t", "end_user": "u"}),
            chunk("self", 2, scope={"tenant": "t", "agent_self": "a"}),
            chunk("neither", 3, scope={"tenant": "t", "group": "g"}),
            chunk("elsewhere", 4, scope={"tenant": "x", "end_user": "u"}),
        ],
        idempotency_key="k",
        ctx=ctx,
    )
    rows = store.search(vec(9), top_k=10, scope_any=[{"end_user": "u"}, {"agent_self": "a"}])
    assert sorted(r["chunk_id"] for r in rows) == ["elsewhere", "self", "subject"]
    rows = store.search(
        vec(9),
        top_k=10,
        scope_all={"tenant": "t"},
        scope_any=[{"end_user": "u"}, {"agent_self": "a"}],
    )
    assert sorted(r["chunk_id"] for r in rows) == ["self", "subject"]


def test_empty(store: RatatoskrMemoryStore, ctx: DispatchContext) -> None:
    assert store.search(vec(1), top_k=5) == []
    store.upsert_many(
        [chunk("a", 1, scope={}), chunk("b", 2, scope={"tenant": "t"})],
        idempotency_key="k",
        ctx=ctx,
    )
    assert {r["chunk_id"] for r in store.search(vec(1), top_k=5)} == {"a", "b"}
    assert [r["chunk_id"] for r in store.search(vec(1), top_k=5, scope_all={"tenant": "t"})] == [
        "b"
    ]


def test_metadata_filter_rejected(store: RatatoskrMemoryStore) -> None:
    with pytest.raises(InvalidArguments):
        store.search(vec(1), top_k=1, metadata_filter={"trust_tier": 1})
    assert store.search(vec(1), top_k=1, metadata_filter={}) == []


def test_lattice_axes(store: RatatoskrMemoryStore, ctx: DispatchContext) -> None:
    with pytest.raises(InvalidFilter):
        store.search(vec(1), top_k=1, scope_all={"planet": "x"})
    with pytest.raises(InvalidFilter):
        store.search(vec(1), top_k=1, scope_any=[{"planet": "x"}])
    with pytest.raises(InvalidArguments):
        store.search(vec(1), top_k=1, scope_any={"tenant": "x"})  # type: ignore[arg-type]
    store.upsert_many([chunk("a", 1, scope={"agent_self": "me"})], idempotency_key="k", ctx=ctx)
    assert store.search(vec(1), top_k=1, scope_all={"agent_self": "me"})[0]["chunk_id"] == "a"


def test_get_hit_absent_many(store: RatatoskrMemoryStore, ctx: DispatchContext) -> None:
    store.upsert_many([chunk("a", 1), chunk("b", 2)], idempotency_key="k", ctx=ctx)
    assert store.get("zzz") is None
    got = store.get_many(["b", "zzz", "a", "b"])
    assert [g["id"] for g in got] == ["b", "a"]


def test_delete_hit_and_absent(store: RatatoskrMemoryStore, ctx: DispatchContext) -> None:
    store.upsert_many([chunk("a", 1), chunk("b", 2)], idempotency_key="k", ctx=ctx)
    assert store.delete_many(["a", "a"]) == {"deleted": 1}
    assert store.get("a") is None
    assert [r["chunk_id"] for r in store.search(vec(1), top_k=5)] == ["b"]
    with store.database.read() as conn:
        assert conn.execute("SELECT count(*) FROM memory_vec").fetchall() == [(1,)]
    assert store.delete_many(["nope"]) == {"deleted": 0}


def test_reinsert_after_delete_and_update_revision(
    store: RatatoskrMemoryStore, ctx: DispatchContext
) -> None:
    store.upsert_many([chunk("a", 1)], idempotency_key="k1", ctx=ctx)
    store.upsert_many([chunk("a", 2, scope={"tenant": "t2"})], idempotency_key="k2", ctx=ctx)
    rows = store.search(vec(2), top_k=5, scope_all={"tenant": "t2"})
    assert [(r["chunk_id"], r["revision"]) for r in rows] == [("a", 2)]
    assert store.search(vec(2), top_k=5, scope_all={"tenant": "t1"}) == []
    store.delete_many(["a"])
    store.upsert_many([chunk("a", 3)], idempotency_key="k3", ctx=ctx)
    got = store.get("a")
    assert got is not None
    assert got["revision"] == 1


def test_ties_order_by_chunk_id(store: RatatoskrMemoryStore, ctx: DispatchContext) -> None:
    store.upsert_many([chunk(c, 7) for c in ["c", "a", "b"]], idempotency_key="k", ctx=ctx)
    assert [r["chunk_id"] for r in store.search(vec(7), top_k=3)] == ["a", "b", "c"]


def test_numbers_round_trip_exactly(store: RatatoskrMemoryStore, ctx: DispatchContext) -> None:
    emb = [0.1, 1e-300, 3, 2**53 + 1, -0.0, 1.7976931348623157e308, 5e-324, 0.3333333333333333]
    rec = {"id": "n", "embedding": emb, "scope": {}, "big": 10**30, "uni": "✓ \u0000 '\"; DROP"}
    store.upsert_many([rec], idempotency_key="k", ctx=ctx)
    got = store.get("n")
    assert got == {**rec, "revision": 1}
    assert got is not None
    assert [repr(x) for x in got["embedding"]] == [repr(x) for x in emb]


def test_integer_embeddings_come_back_as_integers(
    store: RatatoskrMemoryStore, ctx: DispatchContext
) -> None:
    rec = {"id": "i", "embedding": [1, 0, 2, 0, 0, 0, 0, 3], "scope": {}}
    store.upsert_many([rec], idempotency_key="k", ctx=ctx)
    got = store.get("i")
    assert got is not None
    assert [type(x) for x in got["embedding"]] == [int] * DIM
    assert store.search([1.0, 0, 2, 0, 0, 0, 0, 3], top_k=1)[0]["score"] == pytest.approx(1.0)


def test_stored_form_is_the_verbatim_record(
    store: RatatoskrMemoryStore, ctx: DispatchContext
) -> None:
    rec = chunk("v", 3, nested={"big": 10**25, "f": 0.1})
    ints = {"id": "w", "embedding": [1, 2.5, 3, 0, 0, 0, 0, 1], "scope": {}}
    store.upsert_many([rec, ints], idempotency_key="k", ctx=ctx)
    with store.database.read() as conn:
        rows = conn.execute(
            "SELECT record_json, embedding_key, embedding_f64 FROM memory_chunks ORDER BY chunk_id"
        ).fetchall()
    # INV-001, read back with nothing but the standard library: all floats → the
    # embedding is little-endian float64 beside the JSON; any int → all in the JSON.
    (text, key, blob), (int_text, int_key, int_blob) = rows
    assert (key, len(blob)) == ("embedding", 8 * DIM)  # type: ignore[arg-type]
    stored = json.loads(str(text))
    assert "embedding" not in stored
    assert {**stored, "embedding": list(struct.unpack(f"<{DIM}d", blob))} == rec  # type: ignore[arg-type]
    assert (int_key, int_blob) == (None, None)
    assert json.loads(str(int_text)) == ints


def test_ttl_expiry_allows_key_reuse(db_file: str, ctx: DispatchContext) -> None:
    now = [1000.0]
    s = open_memory_store(db_file, embedding_dim=DIM, clock=lambda: now[0])
    s.upsert_many([chunk("a", 1)], idempotency_key="k", ctx=ctx, idempotency_class="ephemeral")
    now[0] += 15 * 60 + 1
    assert s.upsert_many([chunk("a", 2)], idempotency_key="k", ctx=ctx)["replayed"] is False
    got = s.get("a")
    assert got is not None
    assert got["revision"] == 2
    s.close()


def test_memory_limits_are_checked_once_when_made(store: RatatoskrMemoryStore) -> None:
    assert store.limits == MemoryLimits(
        DIM,
        DEFAULT_MAX_BATCH,
        DEFAULT_MAX_TOP_K,
        DEFAULT_MAX_SCOPE_ANY,
        DEFAULT_TOMBSTONE_RETENTION,
    )
    assert (store.embedding_dim, store.max_batch, store.tombstone_retention) == (
        DIM,
        DEFAULT_MAX_BATCH,
        DEFAULT_TOMBSTONE_RETENTION,
    )
    for name, bad in (("embedding_dim", 0), ("max_scope_any", True), ("tombstone_retention", -1)):
        fields = {
            "embedding_dim": DIM,
            "max_batch": 1,
            "max_top_k": 1,
            "max_scope_any": 1,
            "tombstone_retention": 1,
            name: bad,
        }
        with pytest.raises(InvalidArguments, match=f"{name} must be a positive integer"):
            MemoryLimits(**fields)
