"""Metadata filters on the PostgreSQL memory store beyond the kit: values holding NUL
and U+0001 (which ``jsonb`` cannot hold as they are), the declared fields' indexes
(made at open for the rows already there, once under concurrent opens) and the
planner narrowing a selective filter by them."""

from __future__ import annotations

import json
import math
import threading
from typing import Any

import psycopg
import pytest
from psycopg import sql

from bifrost.context import DispatchContext
from bifrost.memory.filters import validate_filter
from ratatoskr.memory.postgres import PostgresMemoryStore, open_postgres_memory_store
from ratatoskr.memory.postgres.field_index import field_indexes
from ratatoskr.memory.postgres.filters import filter_sql
from ratatoskr.memory.postgres.schema import CHUNKS
from ratatoskr.postgres import Pool, PoolOptions, StorageUnavailable

CTX = DispatchContext(actor="a", plane="memory")
DIM = 4
FIELDS = ["kind", "metadata.tag"]
# Strings whose JSON text holds the escapes \u0000 / \u0001, or a backslash before
# the letters "u0000" (which must not be read as an escape).
ODD = [
    "\x00",
    "a\x00",
    "a\x00b",
    "\x01",
    "a\x01",
    "\x01\x01",
    "\x00\x01",
    "\\u0000",
    "\\\x00",
    "a",
    "",
]


def _vec(i: int) -> list[float]:
    return [math.cos(i + d) + (d == i % DIM) for d in range(DIM)]


def _open(pool: Pool, schema: str, fields: list[str] = FIELDS) -> PostgresMemoryStore:
    return open_postgres_memory_store(
        pool, schema=schema, embedding_dim=DIM, filterable_fields=fields
    )


def _odd_records() -> list[dict[str, Any]]:
    recs = []
    for i, s in enumerate(ODD):
        recs.append(
            {
                "id": f"r{i:02d}",
                "content": f"c{s}",  # NUL in a field nobody filters on
                "embedding": _vec(i),
                "scope": {"tenant": "t"},
                "kind": s if i % 3 else [s, "x"],
                "metadata": {"tag": ODD[(i * 5) % len(ODD)]},
            }
        )
    return recs


def test_values_holding_nul_and_u0001_filter_exactly(pg_pool: Pool, schema: str) -> None:
    store = _open(pg_pool, schema)
    recs = _odd_records()
    store.upsert_many(recs, idempotency_key="k", ctx=CTX)
    q = _vec(1)
    for field in FIELDS:
        for x in [*ODD, "\x00\x00", "b"]:
            conds = [x, {"$ne": x}, {"$in": [x, "x"]}, {"$nin": [x]}]
            conds += [{op: x} for op in ("$gt", "$gte", "$lt", "$lte")]
            for cond in conds:
                mf = {field: cond}
                oracle = validate_filter(mf, FIELDS)
                assert oracle is not None
                want = sorted(r["id"] for r in recs if oracle.matches(r))
                got = store.search(q, top_k=100, scope_all={"tenant": "t"}, metadata_filter=mf)
                assert sorted(r["chunk_id"] for r in got) == want, (field, cond)
                page = store.scan(scope_all={"tenant": "t"}, metadata_filter=mf)
                assert [r["id"] for r in page["items"]] == want, (field, cond)
    # The records themselves come back unchanged.
    got = store.get_many([r["id"] for r in recs])
    assert [r["content"] for r in got] == [r["content"] for r in recs]


def _index_names(pool: Pool, schema: str) -> set[str]:
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = %s",
            (schema, CHUNKS),
        ).fetchall()
    return {str(r[0]) for r in rows}


def test_declaring_a_field_indexes_the_rows_already_there(pg_pool: Pool, schema: str) -> None:
    store = _open(pg_pool, schema, [])
    store.upsert_many(
        [
            {"id": f"c{i}", "embedding": _vec(i), "scope": {"tenant": "t"}, "kind": f"k{i % 4}"}
            for i in range(40)
        ],
        idempotency_key="k",
        ctx=CTX,
    )
    store.close()
    wanted = {name for name, _key in field_indexes(CHUNKS, ["kind"])}
    assert len(wanted) == 4
    assert not wanted & _index_names(pg_pool, schema)
    store = _open(pg_pool, schema, ["kind"])
    assert wanted <= _index_names(pg_pool, schema)
    with pg_pool.connection() as conn:
        # Built, valid and holding the existing rows (not only later writes).
        rows = conn.execute(
            "SELECT c.relname, i.indisvalid, c.reltuples FROM pg_index AS i"
            " JOIN pg_class AS c ON c.oid = i.indexrelid"
            " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname = ANY(%s)",
            (schema, sorted(wanted)),
        ).fetchall()
    assert all(valid for _name, valid, _tuples in rows)
    got = store.search(_vec(0), top_k=100, metadata_filter={"kind": "k1"})
    assert sorted(r["chunk_id"] for r in got) == sorted(f"c{i}" for i in range(1, 40, 4))
    store.close()


def test_concurrent_opens_build_each_index_once(pg_pool: Pool, schema: str) -> None:
    _open(pg_pool, schema, []).close()  # the schema exists; the fields are new
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            _open(pg_pool, schema, ["kind", "metadata.tag"]).close()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    wanted = {name for name, _key in field_indexes(CHUNKS, ["kind", "metadata.tag"])}
    assert wanted <= _index_names(pg_pool, schema)


def _plan(pg_dsn: str, schema: str, mf: dict[str, Any]) -> str:
    flt = validate_filter(mf, ["kind"])
    assert flt is not None
    query = sql.SQL("EXPLAIN (FORMAT JSON) SELECT chunk_id FROM {t} WHERE tenant = 't0' AND {f}")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        row = conn.execute(
            query.format(t=sql.Identifier(schema, CHUNKS), f=filter_sql(flt))
        ).fetchone()
    assert row is not None
    return json.dumps(row[0])


@pytest.mark.parametrize(
    ("mf", "index"),
    [
        ({"kind": "k10"}, "eqt"),
        ({"kind": {"$in": ["k10", "k20"]}}, "eqt"),
        ({"kind": {"$gte": 5000, "$lt": 5020}}, "num"),
        ({"kind": {"$gt": "k1", "$lt": "k2"}}, "str"),
    ],
)
def test_a_selective_filter_narrows_by_its_index(
    pg_pool: Pool, pg_dsn: str, schema: str, mf: dict[str, Any], index: str
) -> None:
    store = _open(pg_pool, schema, ["kind"])
    # Two tenants; "kind" "common" in 85% of the rows, k0, k10, … k40 (2% each) in
    # 10%, a number in 5%.
    recs = []
    for i in range(6000):
        kind: Any = f"k{i % 50}" if i % 10 == 0 else "common"
        if i % 20 == 5:
            kind = i
        recs.append(
            {
                "id": f"c{i:05d}",
                "embedding": _vec(i),
                "scope": {"tenant": f"t{i % 2}"},
                "kind": kind,
            }
        )
    for s in range(0, len(recs), 1000):
        store.upsert_many(recs[s : s + 1000], idempotency_key=f"k{s}", ctx=CTX)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, CHUNKS)))
    name = {n.rsplit("_", 1)[1]: n for n, _key in field_indexes(CHUNKS, ["kind"])}
    assert name[index] in _plan(pg_dsn, schema, mf)
    # A range most of the store passes: the scope's index, not the range's.
    assert name["str"] not in _plan(pg_dsn, schema, {"kind": {"$gte": "common"}})
    store.close()


def test_a_role_that_does_not_own_the_table_is_told_why(
    pg_pool: Pool, pg_dsn: str, schema: str
) -> None:
    _open(pg_pool, schema, []).close()
    role = f"r_{schema}"
    admin = psycopg.connect(pg_dsn, autocommit=True)
    try:
        ident = sql.Identifier(role)
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(ident))
        admin.execute(
            sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), ident)
        )
        admin.execute(
            sql.SQL("GRANT ALL ON ALL TABLES IN SCHEMA {} TO {}").format(
                sql.Identifier(schema), ident
            )
        )
        dsn = psycopg.conninfo.make_conninfo(pg_dsn, user=role)
        with pytest.raises(StorageUnavailable, match="owns the memory table"):
            open_postgres_memory_store(
                dsn, schema=schema, embedding_dim=DIM, filterable_fields=["kind"]
            )
        # Nothing was made; without new fields the role opens the store as before.
        assert not {n for n, _k in field_indexes(CHUNKS, ["kind"])} & _index_names(pg_pool, schema)
        open_postgres_memory_store(dsn, schema=schema, embedding_dim=DIM).close()
    finally:
        admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        admin.close()


def test_filtered_statements_are_never_prepared(pg_dsn: str, schema: str) -> None:
    # One connection, so every call below runs on the one whose statements we read.
    store = open_postgres_memory_store(
        pg_dsn,
        schema=schema,
        embedding_dim=DIM,
        filterable_fields=["kind"],
        pool_options=PoolOptions(min_size=1, max_size=1),
    )
    try:
        recs = [
            {"id": f"c{i}", "embedding": _vec(i), "scope": {"tenant": "t"}, "kind": f"k{i % 3}"}
            for i in range(30)
        ]
        store.upsert_many(recs, idempotency_key="k", ctx=CTX)
        for _ in range(8):  # past psycopg's prepare_threshold (5)
            assert len(store.search(_vec(1), top_k=3, metadata_filter={"kind": "k1"})) == 3
            assert (
                len(store.scan(scope_all={"tenant": "t"}, metadata_filter={"kind": "k1"})["items"])
                == 10
            )
            store.search(_vec(1), top_k=3, scope_all={"tenant": "t"})
        prepared = store._db.run(
            lambda cur: [
                str(r[0]) for r in cur.execute("SELECT statement FROM pg_prepared_statements")
            ]
        )
        assert prepared, "the unfiltered search is prepared as before"
        assert not [s for s in prepared if "jsonb" in s]
    finally:
        store.close()


def test_percent_signs_and_braces_in_fields_and_values(pg_pool: Pool, schema: str) -> None:
    # psycopg reads "%" in a statement run with parameters as a placeholder.
    fields = ["k%s", "metadata.a{b}%%"]
    store = _open(pg_pool, schema, fields)
    values = ["%s", "%b", "{}", "%%", "x", "%"]
    recs: list[dict[str, Any]] = [
        {
            "id": f"c{i}",
            "embedding": _vec(i),
            "scope": {"tenant": "t"},
            "k%s": v,
            "metadata": {"a{b}%%": [v] if i % 2 else v},
        }
        for i, v in enumerate(values)
    ]
    store.upsert_many(recs, idempotency_key="k", ctx=CTX)
    for field in fields:
        for v in values:
            for cond in (v, {"$ne": v}, {"$in": [v, "%d"]}, {"$gte": v}, {"$lt": v}):
                mf = {field: cond}
                oracle = validate_filter(mf, fields)
                assert oracle is not None
                want = sorted(r["id"] for r in recs if oracle.matches(r))
                got = store.search(_vec(0), top_k=10, scope_all={"tenant": "t"}, metadata_filter=mf)
                assert sorted(r["chunk_id"] for r in got) == want, mf
                page = store.scan(scope_all={"tenant": "t"}, metadata_filter=mf)
                assert [r["id"] for r in page["items"]] == want, mf
    with pg_pool.connection() as conn:
        defs = dict(
            conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s",
                (schema,),
            ).fetchall()
        )
    for field, key in zip(fields, ["'k%s'", "'a{b}%%'"], strict=True):
        names = [n for n, _k in field_indexes(CHUNKS, [field])]
        assert all(key in str(defs[n]) for n in names), field
    store.close()
