"""What only the SQLite store has: its tables, reopen, dimension checks, the stored
form, exact numbers, the vector table kept in step, TTL reuse across a reopen.

The seed contract's TESTS entries (basic_upsert, replay, conflict, optimistic_lock,
injection_rule, basic_search, scope_isolation, scope_any_union, empty,
metadata_filter_rejected, lattice_axes, get_*, delete_*) run against this store
through bifrost's conformance kit (``test_conformance.py``), under the same names and
more strictly (nothing written on every refusal, exact cosine, every error shape)."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import pytest

from bifrost.context import DispatchContext
from bifrost.errors import InvalidArguments
from bifrost.limits import InvalidLimits
from bifrost.memory.validation import DEFAULT_MAX_BATCH, DEFAULT_MAX_TOP_K
from bifrost.scope import DEFAULT_MAX_SCOPE_ANY
from ratatoskr.memory import MemoryLimits, RatatoskrMemoryStore, open_memory_store
from ratatoskr.memory.changes import DEFAULT_TOMBSTONE_RETENTION
from ratatoskr.memory.postgres import PostgresMemoryStore
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
        "max_page": 1000,
    }


def test_delete_removes_the_vector_row(store: RatatoskrMemoryStore, ctx: DispatchContext) -> None:
    store.upsert_many([chunk("a", 1), chunk("b", 2)], idempotency_key="k", ctx=ctx)
    assert store.delete_many(["a", "a"]) == {"deleted": 1}
    assert store.get("a") is None
    assert [r["chunk_id"] for r in store.search(vec(1), top_k=5)] == ["b"]
    with store.database.read() as conn:
        assert conn.execute("SELECT count(*) FROM memory_vec").fetchall() == [(1,)]
    assert store.delete_many(["nope"]) == {"deleted": 0}


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
        fields: dict[str, Any] = {
            "embedding_dim": DIM,
            "max_batch": 1,
            "max_top_k": 1,
            "max_scope_any": 1,
            "tombstone_retention": 1,
            name: bad,
        }
        with pytest.raises(InvalidArguments, match=f"{name} must be a positive integer"):
            MemoryLimits(**fields)


@pytest.mark.parametrize("name", ["max_batch", "max_top_k", "max_scope_any", "max_page"])
def test_every_memory_store_refuses_a_bad_limit_alike(name: str, tmp_path: Path) -> None:
    # open_memory_store once opened with max_batch=0 or max_top_k=0 while the reference
    # store raised: one check (bifrost.limits) now refuses it in every store, nothing made.
    path = tmp_path / "m.db"
    bad: dict[str, Any] = {name: 0}
    with pytest.raises(InvalidLimits, match=f"{name} must be a positive integer"):
        open_memory_store(str(path), embedding_dim=DIM, **bad)
    assert not path.exists()
    with pytest.raises(InvalidLimits, match=f"{name} must be a positive integer"):
        open_memory_store(":memory:", embedding_dim=DIM, **bad)
    # The check runs before the PostgreSQL store touches its database.
    no_database: Any = None
    with pytest.raises(InvalidLimits, match=f"{name} must be a positive integer"):
        PostgresMemoryStore(no_database, embedding_dim=DIM, **bad)
