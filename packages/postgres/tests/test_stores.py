"""What the PostgreSQL stores must get right beyond the kit: ids and keys PostgreSQL
text cannot hold as they are, filters no stored value can match, near-tie clusters
larger than the first statement's limit, bounded ledger pruning, big unions."""

from __future__ import annotations

import random
import time
from typing import Any

import numpy as np
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg import sql

from bifrost.affect.protocol import affect_health
from bifrost.context import DispatchContext
from bifrost.errors import InvalidArguments
from bifrost.memory.protocol import memory_health
from bifrost.memory.validation import DEFAULT_MAX_BATCH, DEFAULT_MAX_PAGE
from bifrost.quota import NO_QUOTA, record_size
from bifrost.scope import DEFAULT_MAX_SCOPE_ANY, matches_scope
from ratatoskr.affect.postgres import PostgresAffectStore, open_postgres_affect_store
from ratatoskr.memory.postgres import PostgresMemoryStore, open_postgres_memory_store
from ratatoskr.memory.postgres import schema as memory_schema
from ratatoskr.memory.postgres.schema import (
    COVERED_DIM_MAX,
    COVERED_TENANT_BYTES,
    COVERING_INDEX,
)
from ratatoskr.memory.postgres.search import rerank_margin
from ratatoskr.memory.records import stored_form
from ratatoskr.postgres import Pool
from ratatoskr.postgres.database import PostgresDatabase
from ratatoskr.postgres.migrations import MetaSetting
from ratatoskr.postgres.scope import conjunctions
from ratatoskr.postgres.text import from_db, to_db
from ratatoskr.postgres.vector import Vector

CTX = DispatchContext(actor="a", plane="memory")
ODD = ["\x00", "\x01", "a\x00", "a\x01", "a", "a\x00b", "\x01\x02", "\x7f", "ü", "🦊", "b"]


@given(st.lists(st.text(min_size=0, max_size=6), min_size=1, max_size=20))
def test_stored_text_round_trips_and_keeps_order(values: list[str]) -> None:
    stored = [to_db(v) for v in values]
    assert [from_db(s) for s in stored] == values
    assert all("\x00" not in s for s in stored)
    # UTF-8 byte order (COLLATE "C") of the stored forms is Python's order of the originals.
    by_bytes = sorted(range(len(values)), key=lambda i: stored[i].encode("utf-8", "surrogatepass"))
    assert [values[i] for i in by_bytes] == sorted(values)


def _vec(*xs: float) -> list[float]:
    return [*xs, *([0.0] * (4 - len(xs)))]


def test_memory_ids_and_scopes_with_nul(pg_pool: Pool, schema: str) -> None:
    store = open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=4)
    recs: list[dict[str, Any]] = [
        {"id": cid, "embedding": _vec(1.0, i / 10), "scope": {"tenant": f"t{cid}"}}
        for i, cid in enumerate(ODD)
    ]
    store.upsert_many(recs, idempotency_key="k\x00", ctx=CTX)
    for rec in recs:
        assert store.get(rec["id"]) == {**rec, "revision": 1}
        rows = store.search(_vec(1.0), top_k=5, scope_all=rec["scope"])
        assert [r["chunk_id"] for r in rows] == [rec["id"]]
    assert store.scopes_of(["\x00", "nope", "a\x01"]) == {
        "\x00": {"tenant": "t\x00"},
        "a\x01": {"tenant": "ta\x01"},
    }
    assert [r["id"] for r in store.get_many(list(reversed(ODD)))] == list(reversed(ODD))
    assert store.delete_many(["\x00", "\x01", "ghost"]) == {"deleted": 2}
    assert store.count() == len(ODD) - 2


def test_filters_no_stored_value_can_match(pg_pool: Pool, schema: str) -> None:
    """A lone surrogate in a filter matches nothing (records cannot hold one)."""
    memory = open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=4)
    memory.upsert_many(
        [{"id": "x", "embedding": _vec(1.0), "scope": {"tenant": "t"}}],
        idempotency_key="k",
        ctx=CTX,
    )
    assert memory.search(_vec(1.0), top_k=3, scope_all={"tenant": "\ud800"}) == []
    got = memory.search(_vec(1.0), top_k=3, scope_any=[{"tenant": "\ud800"}, {"tenant": "t"}])
    assert [r["chunk_id"] for r in got] == ["x"]
    # Members contradicting scope_all leave nothing.
    assert (
        memory.search(_vec(1.0), top_k=3, scope_all={"tenant": "t"}, scope_any=[{"tenant": "u"}])
        == []
    )


def test_affect_keys_with_nul_page_in_python_order(pg_pool: Pool, schema: str) -> None:
    store = open_postgres_affect_store(pg_pool, schema=schema)
    keys = [*ODD, *(f"k{i:02}" for i in range(30))]
    random.Random(3).shuffle(keys)
    store.put_many(
        [{"key": k, "scope": {"group": "g\x00" if i % 2 else "g"}} for i, k in enumerate(keys)],
        idempotency_key="k",
        ctx=CTX,
    )
    for scope_all in ({}, {"group": "g\x00"}):
        seen: list[str] = []
        after: str | None = None
        while True:
            page = store.list(scope_all=scope_all, limit=4, after_key=after)
            seen += [item["key"] for item in page["items"]]
            after = page["next_after_key"]
            if after is None:
                break
        want = sorted(
            k
            for i, k in enumerate(keys)
            if matches_scope({"group": "g\x00" if i % 2 else "g"}, scope_all, [])
        )
        assert seen == want
    assert store.get("\x00") is not None
    assert store.history("\x01")["items"][0]["key"] == "\x01"
    assert store.delete_many(["\x00", "\x01"]) == {"deleted": 2}


def test_near_tie_cluster_larger_than_the_first_limit(pg_pool: Pool, schema: str) -> None:
    """200 chunks within the re-rank margin of each other: the statement runs again with
    a larger limit, and the exact float64 order decides."""
    dim = 16
    store = open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=dim)
    rng = random.Random(11)
    base = np.array([rng.gauss(0, 1) for _ in range(dim)])
    margin = rerank_margin(dim)
    recs = []
    for i in range(200):
        # Float32 cannot tell these apart (1 - cos ~ 1e-11, all within the margin);
        # float64 orders them far above its rounding (~1e-16).
        v = base + np.array([rng.gauss(0, margin / 10) for _ in range(dim)])
        recs.append({"id": f"c{i:03}", "embedding": v.tolist(), "scope": {}})
    recs.append({"id": "far", "embedding": (-base).tolist(), "scope": {}})
    store.upsert_many(recs, idempotency_key="k", ctx=CTX)
    q = base.tolist()
    unit = base / np.linalg.norm(base)

    def exact(r: dict[str, Any]) -> float:
        e = np.array(r["embedding"])
        return float(np.sum((e / np.linalg.norm(e)) * unit))

    oracle = sorted(recs, key=lambda r: (-exact(r), r["id"]))
    for top_k in (1, 5, 60, 201):
        rows = store.search(q, top_k=top_k)
        assert [r["chunk_id"] for r in rows] == [r["id"] for r in oracle[:top_k]]


def test_integer_embeddings_keep_their_types(pg_pool: Pool, schema: str) -> None:
    store = open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=4)
    rec = {"id": "i", "embedding": [3, 0, 2**70, -1], "scope": {}, "n": 1e23, "z": -0.0}
    store.upsert_many([rec], idempotency_key="k", ctx=CTX)
    got = store.get("i")
    assert got == {**rec, "revision": 1}
    assert got is not None
    assert [type(x) for x in got["embedding"]] == [int] * 4
    assert type(got["n"]) is float and str(got["z"]) == "-0.0"
    row = store.search([0.0, 0.0, 1.0, 0.0], top_k=1, include={"embedding": False})[0]
    assert "embedding" not in row["chunk"]


def _ledger_rows(pg_dsn: str, schema: str, table: str) -> int:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.{}").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_ledger_pruning_is_bounded(pg_dsn: str, pg_pool: Pool, schema: str) -> None:
    now = [1_800_000_000.0]
    store = open_postgres_affect_store(pg_pool, schema=schema, clock=lambda: now[0])
    for i in range(150):
        store.put_many([], idempotency_key=f"e{i}", ctx=CTX, idempotency_class="ephemeral")
    assert _ledger_rows(pg_dsn, schema, "affect_idempotency") == 150
    now[0] += 901  # every entry expired
    store.put_many([], idempotency_key="x", ctx=CTX)
    assert _ledger_rows(pg_dsn, schema, "affect_idempotency") == 150 - 64 + 1
    store.put_many([], idempotency_key="y", ctx=CTX)
    store.put_many([], idempotency_key="z", ctx=CTX)
    assert _ledger_rows(pg_dsn, schema, "affect_idempotency") == 3


def test_largest_unions(pg_pool: Pool, schema: str) -> None:
    memory = open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=4)
    affect = open_postgres_affect_store(pg_pool, schema=f"{schema}_a")
    try:
        members = [{"tenant": f"t{i}", "end_user": f"u{i % 3}"} for i in range(256)]
        memory.upsert_many(
            [
                {"id": f"m{i}", "embedding": _vec(1.0, i), "scope": members[i]}
                for i in range(0, 256, 16)
            ],
            idempotency_key="k",
            ctx=CTX,
        )
        affect.put_many(
            [{"key": f"a{i:03}", "scope": members[i]} for i in range(0, 256, 16)],
            idempotency_key="k",
            ctx=CTX,
        )
        assert len(memory.search(_vec(1.0), top_k=100, scope_any=members)) == 16
        page = affect.list(scope_any=members, limit=10)
        assert [it["key"] for it in page["items"]] == [f"a{i:03}" for i in range(0, 160, 16)]
        assert page["next_after_key"] == "a144"
    finally:
        with pg_pool.connection() as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(f"{schema}_a")))


def _plan(pool: Pool, schema: str, statement: bytes, params: tuple[Any, ...]) -> str:
    with pool.connection() as conn:  # the pool's connections can send a Vector
        conn.execute(sql.SQL("VACUUM ANALYZE {}.memory_chunks").format(sql.Identifier(schema)))
        # A tiny table: the planner would scan it, or take the plain index's bitmap (at
        # 100k rows it picks the index-only scan by itself: benchmarks/postgres_bench.py).
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET enable_bitmapscan = off")
        try:
            rows = conn.execute(b"EXPLAIN " + statement, params).fetchall()
        finally:
            conn.execute("RESET ALL")
    return "\n".join(str(r[0]) for r in rows)


def test_tenant_search_is_an_index_only_scan_and_long_values_still_work(
    pg_dsn: str, pg_pool: Pool, schema: str
) -> None:
    """384 dims: the covering index exists, holds the longest ids with tenants up to its
    bound (random, incompressible characters), and a tenant-scoped search reads it
    alone; a tenant past the bound is kept out of it and still found exactly."""

    dim = 384
    rng = random.Random(5)
    store = open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=dim)

    def noise(n: int) -> str:  # 2-byte UTF-8 characters pglz cannot shrink
        return "".join(chr(rng.randrange(0x400, 0x7FF)) for _ in range(n))

    short, long_ = noise(COVERED_TENANT_BYTES // 2), noise(COVERED_TENANT_BYTES // 2 + 1)
    recs: list[dict[str, Any]] = [
        {
            "id": noise(256) if i < 4 else f"c{i}",  # 512 bytes: the longest id there is
            "embedding": [rng.gauss(0, 1) for _ in range(dim)],
            "scope": {"tenant": short if i % 2 else long_},
        }
        for i in range(40)
    ]
    store.upsert_many(recs, idempotency_key="k", ctx=CTX)
    q: list[float] = recs[7]["embedding"]
    for tenant in (short, long_):
        got = store.search(q, top_k=5, scope_all={"tenant": tenant})
        members = [r for r in recs if r["scope"]["tenant"] == tenant]
        v = np.asarray(q) / np.linalg.norm(q)
        truth = sorted(
            members,
            key=lambda r: (
                -float(np.asarray(r["embedding"]) @ v / np.linalg.norm(r["embedding"])),
                r["id"],
            ),
        )[:5]
        assert [r["chunk_id"] for r in got] == [r["id"] for r in truth]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        indexed = conn.execute(
            sql.SQL(
                "SELECT count(*) FROM {}.memory_chunks WHERE octet_length(tenant) <= %s"
            ).format(sql.Identifier(schema)),
            (COVERED_TENANT_BYTES,),
        ).fetchone()
    assert indexed == (20,)
    probe = Vector(np.asarray(q, dtype=np.float32) / np.float32(np.linalg.norm(q)))
    conjs = conjunctions({"tenant": short}, [])
    statement = store._search.statement(conjs)
    plan = _plan(
        pg_pool,
        schema,
        statement,
        (*store._search.top_params(conjs, probe, 21, store._cutoff()), 4, 1e-4),
    )
    assert f"Index Only Scan using {COVERING_INDEX}" in plan, plan
    # A union of tenants: member by member (each may take its index; at 100k a tenant's
    # is the covering one), and still exact.
    members = [{"tenant": short}, {"tenant": "nobody"}, {"tenant": long_}]
    assert store._search.statement(conjunctions({}, members)).count(b" UNION ") == 2
    got = store.search(q, top_k=50, scope_any=members)
    v = np.asarray(q) / np.linalg.norm(q)
    everyone = sorted(
        recs,
        key=lambda r: (
            -float(np.asarray(r["embedding"]) @ v / np.linalg.norm(r["embedding"])),
            r["id"],
        ),
    )
    assert [r["chunk_id"] for r in got] == [r["id"] for r in everyone]
    conjs = conjunctions({"tenant": long_}, [])
    statement = store._search.statement(conjs)
    assert COVERING_INDEX not in _plan(
        pg_pool,
        schema,
        statement,
        (*store._search.top_params(conjs, probe, 21, store._cutoff()), 4, 1e-4),
    )


def test_no_covering_index_where_the_vector_cannot_fit(
    pg_dsn: str, pg_pool: Pool, schema: str
) -> None:
    dim = COVERED_DIM_MAX + 1
    store = open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=dim)
    rec = {"id": "x" * 512, "embedding": [1.0] * dim, "scope": {"tenant": "t" * 256}}
    store.upsert_many([rec], idempotency_key="k", ctx=CTX)
    assert [
        r["chunk_id"] for r in store.search([1.0] * dim, top_k=1, scope_all={"tenant": "t" * 256})
    ] == ["x" * 512]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
            (schema, COVERING_INDEX),
        ).fetchone()
    assert found == (0,)


def test_store_options_take_their_defaults_and_health_is_the_planes(
    pg_pool: Pool, schema: str
) -> None:
    """The options every store of a plane shares (bifrost's MemoryOptions/AffectOptions),
    defaults and health included, reach the PostgreSQL stores; a misspelt one is the
    TypeError an explicit signature raises, before any database is touched."""
    memory = open_postgres_memory_store(
        pg_pool, schema=schema, embedding_dim=4, max_top_k=3, filterable_fields=["a", "a"]
    )
    assert memory.health() == memory_health(
        embedding_dim=4, max_batch=DEFAULT_MAX_BATCH, max_top_k=3, max_page=DEFAULT_MAX_PAGE
    )
    assert (memory.max_scope_any, memory.filterable_fields) == (DEFAULT_MAX_SCOPE_ANY, ("a",))
    assert memory.retention_s is None and memory.quota is NO_QUOTA
    affect = open_postgres_affect_store(pg_pool, schema=f"{schema}_a", max_page=7)
    assert affect.health() == affect_health(max_batch=DEFAULT_MAX_BATCH, max_page=7)
    no_database: Any = None
    misspelt: dict[str, Any] = {"max_pages": 7}
    with pytest.raises(TypeError, match="'max_pages'"):
        PostgresMemoryStore(no_database, embedding_dim=4, **misspelt)
    with pytest.raises(TypeError, match="'max_pages'"):
        PostgresAffectStore(no_database, **misspelt)
    with pytest.raises(TypeError, match="'max_pages'"):
        open_postgres_affect_store(pg_pool, schema=f"{schema}_b", **misspelt)
    with pytest.raises(TypeError, match="'max_pages'"):
        open_postgres_memory_store(pg_pool, schema=f"{schema}_c", embedding_dim=4, **misspelt)
    with pytest.raises(InvalidArguments, match="retention_s"):
        open_postgres_memory_store(pg_pool, schema=f"{schema}_d", embedding_dim=4, retention_s=-1)
    with pytest.raises(InvalidArguments, match="filterable field"):
        open_postgres_memory_store(
            pg_pool, schema=f"{schema}_e", embedding_dim=4, filterable_fields=[""]
        )
    with pg_pool.connection() as conn:
        made = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = ANY(%s)",
            ([f"{schema}_{s}" for s in "bcde"],),
        ).fetchone()
    assert made is not None and made[0] == 0  # refused before any schema was made


def _storage(pg_dsn: str, schema: str) -> dict[str, str]:
    """``attstorage`` of ``embedding`` in the chunks table and each index holding it."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT c.relname, a.attstorage FROM pg_attribute a"
            " JOIN pg_class c ON c.oid = a.attrelid"
            " WHERE c.relnamespace = %s::regnamespace AND a.attname = 'embedding'",
            (schema,),
        ).fetchall()
    return {str(r): str(s) for r, s in rows}


def _blob_lengths(pg_dsn: str, schema: str) -> dict[str, tuple[int | None, int | None]]:
    """``{chunk_id: (octet_length(embedding_f64), octet_length(embedding_f32))}``."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT chunk_id, octet_length(embedding_f64), octet_length(embedding_f32)"
                " FROM {}.memory_chunks"
            ).format(sql.Identifier(schema))
        ).fetchall()
    return {str(i): (f64, f32) for i, f64, f32 in rows}


def _old_schema_with_a_row(pool: Pool, schema: str, dim: int, rec: dict[str, Any]) -> None:
    """A schema of migrations 1-5 holding ``rec`` as those versions stored it."""
    db = PostgresDatabase(
        pool,
        schema=schema,
        plane=memory_schema.PLANE,
        migrations=memory_schema.migrations(schema, dim)[:5],
        meta={"embedding_dim": MetaSetting(str(dim), "embedding_dim")},
    )
    form = stored_form(rec)
    unit = np.asarray(rec["embedding"]) / np.linalg.norm(rec["embedding"])
    db.run(
        lambda cur: cur.execute(
            sql.SQL(
                "INSERT INTO {}.memory_chunks (chunk_id, tenant, revision, record_json,"
                " embedding_key, embedding_f64, embedding, updated_at, record_bytes)"
                " VALUES (%s, %s, 1, %s, %s, %s, %s::text::public.vector, %s, %s)"
            ).format(sql.Identifier(schema)),
            (
                rec["id"],
                rec["scope"]["tenant"],
                form.record_json,
                form.embedding_key,
                form.embedding_f64,
                str(unit.astype(np.float32).tolist()),
                time.time(),
                record_size(rec),
            ),
        ),
        mode="write",
    )


@pytest.mark.parametrize("dim", [4, COVERED_DIM_MAX + 1])
def test_covered_vectors_are_stored_plain_and_old_schemas_upgrade(
    pg_dsn: str, pg_pool: Pool, schema: str, dim: int
) -> None:
    """Migration 6: where the covering index exists, the vector's storage is PLAIN in the
    table and in the index (a btree entry over 512 bytes is otherwise run through pglz
    on every write); above COVERED_DIM_MAX it stays MAIN. A schema made by migrations
    1-5 upgrades at open and reads back what it held."""
    rec = {"id": "a", "embedding": [0.1] * dim, "scope": {"tenant": "t"}, "content": "x"}
    _old_schema_with_a_row(pg_pool, schema, dim, rec)
    covered = dim <= COVERED_DIM_MAX
    tables = {"memory_chunks": "m", **({COVERING_INDEX: "m"} if covered else {})}
    assert _storage(pg_dsn, schema) == tables
    store = open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=dim)
    assert _storage(pg_dsn, schema) == {t: "p" if covered else "m" for t in tables}
    assert store.get("a") == {**rec, "revision": 1}
    store.upsert_many([{**rec, "id": "b"}], idempotency_key="k2", ctx=CTX)
    got = store.search([0.1] * dim, top_k=2, scope_all={"tenant": "t"})
    assert [r["chunk_id"] for r in got] == ["a", "b"]
    assert [r["revision"] for r in store.get_many(["a", "b"])] == [1, 1]


def test_float32_exact_embeddings_keep_a_float32_blob(
    pg_dsn: str, pg_pool: Pool, schema: str
) -> None:
    """Migration 7: an embedding whose every element is float32-exact is stored as
    float32 (half the bytes), any other float embedding as float64, an embedding with
    an int as JSON; each reads back bit for bit, through get, search, scan and export,
    and a schema made before the migration keeps its float64 rows readable."""
    dim = 4
    old = {"id": "old", "embedding": [0.25, -0.0, 1.0, 2.0], "scope": {"tenant": "t"}}
    _old_schema_with_a_row(pg_pool, schema, dim, old)
    store = open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=dim)
    tiny = float(np.float32(1e-45))  # a float32 subnormal: exact
    recs: list[dict[str, Any]] = [
        {"id": "f32", "embedding": [0.5, -0.0, tiny, -3.25], "scope": {"tenant": "t"}},
        {"id": "f64", "embedding": [0.1, 0.2, 0.3, 1e-300], "scope": {"tenant": "t"}},
        {"id": "int", "embedding": [1, 0.5, 0.0, 2.0], "scope": {"tenant": "t"}},
    ]
    store.upsert_many(recs, idempotency_key="k", ctx=CTX)
    assert _blob_lengths(pg_dsn, schema) == {
        "old": (8 * dim, None),
        "f32": (None, 4 * dim),
        "f64": (8 * dim, None),
        "int": (None, None),
    }
    everything = [old, *recs]
    for rec in everything:
        got = store.get(rec["id"])
        assert got == {**rec, "revision": 1}
        assert [type(x) for x in got["embedding"]] == [type(x) for x in rec["embedding"]]
        assert np.signbit(got["embedding"]).tolist() == np.signbit(rec["embedding"]).tolist()
    hits = store.search([0.5, 0.0, 0.0, -3.25], top_k=4, scope_all={"tenant": "t"})
    assert hits[0]["chunk_id"] == "f32"
    page = store.scan(scope_all={"tenant": "t"}, include={"embedding": True}, limit=10)
    assert [{k: v for k, v in r.items() if k != "revision"} for r in page["items"]] == sorted(
        everything, key=lambda r: r["id"]
    )
    exported, _ = store.export_page(None, 10, {})
    assert [c.record for c in exported] == sorted(everything, key=lambda r: r["id"])
    # Rewriting the old row takes the float32 form; the check refuses a half-made one.
    store.upsert_many([old], idempotency_key="k2", ctx=CTX)
    assert _blob_lengths(pg_dsn, schema)["old"] == (None, 4 * dim)
    with pytest.raises(psycopg.errors.CheckViolation), psycopg.connect(pg_dsn) as conn:
        conn.execute(
            sql.SQL("UPDATE {}.memory_chunks SET embedding_f64 = %s WHERE chunk_id = 'f32'").format(
                sql.Identifier(schema)
            ),
            (bytes(8 * dim),),
        )
