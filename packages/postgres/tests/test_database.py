"""The shared machinery: migrations under the advisory lock, fixed settings, schema
ownership, the typed errors and what the schema looks like on the server."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from psycopg import sql

from bifrost.context import DispatchContext
from bifrost.errors import InvalidArguments
from ratatoskr.affect.postgres import open_postgres_affect_store
from ratatoskr.affect.postgres.schema import migrations as affect_migrations
from ratatoskr.memory.postgres import open_postgres_memory_store
from ratatoskr.memory.postgres.schema import migrations as memory_migrations
from ratatoskr.postgres import (
    ForeignDatabase,
    Pool,
    PoolOptions,
    SchemaMismatch,
    SchemaTooNew,
    StorageCorrupt,
    StorageError,
    StorageFull,
    StorageReadOnly,
    StorageUnavailable,
    on_table,
    open_pool,
)
from ratatoskr.postgres.errors import translate

CTX = DispatchContext(actor="a", plane="memory")


def _rows(pg_dsn: str, query: sql.Composed | sql.SQL, params: tuple[Any, ...] = ()) -> list[Any]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows: list[Any] = conn.execute(query, params).fetchall()
    return rows


def _q(schema: str, table: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))


def test_fresh_schema_records_migrations_and_dimension(
    pg_dsn: str, pg_pool: Pool, schema: str
) -> None:
    store = open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=12)
    assert _rows(
        pg_dsn,
        sql.SQL("SELECT plane, version FROM {} ORDER BY version").format(
            _q(schema, "ratatoskr_schema")
        ),
    ) == [("memory", m.version) for m in memory_migrations(schema, 12)]
    assert _rows(
        pg_dsn, sql.SQL("SELECT key, value FROM {}").format(_q(schema, "ratatoskr_meta"))
    ) == [("embedding_dim", "12")]
    store.close()
    # Reopening finds nothing to do.
    again = open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=12)
    assert again.health()["embedding_dim"] == 12
    again.close()


def test_concurrent_opens_migrate_once(pg_dsn: str, schema: str) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def open_one() -> None:
        barrier.wait()
        try:
            s = open_postgres_memory_store(
                pg_dsn, schema=schema, embedding_dim=4, pool_options=PoolOptions(max_size=1)
            )
            s.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    rows = _rows(
        pg_dsn,
        sql.SQL("SELECT plane, version FROM {} ORDER BY version").format(
            _q(schema, "ratatoskr_schema")
        ),
    )
    assert rows == [("memory", m.version) for m in memory_migrations(schema, 4)]


def test_dimension_mismatch_is_refused_and_changes_nothing(
    pg_dsn: str, pg_pool: Pool, schema: str
) -> None:
    store = open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=4)
    store.upsert_many(
        [{"id": "x", "embedding": [1.0, 0.0, 0.0, 0.0], "scope": {}}], idempotency_key="k", ctx=CTX
    )
    store.close()
    before = _rows(pg_dsn, sql.SQL("SELECT * FROM {}").format(_q(schema, "ratatoskr_meta")))
    with pytest.raises(SchemaMismatch) as info:
        open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=8)
    assert (info.value.setting, info.value.stored, info.value.requested) == (
        "embedding_dim",
        "4",
        "8",
    )
    assert "embedding_dim=4" in info.value.message and "embedding_dim=8" in info.value.message
    assert _rows(pg_dsn, sql.SQL("SELECT * FROM {}").format(_q(schema, "ratatoskr_meta"))) == before
    kept = open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=4)
    assert kept.count() == 1
    kept.close()


def test_schema_of_another_plane_is_refused(pg_pool: Pool, schema: str) -> None:
    open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=4).close()
    with pytest.raises(ForeignDatabase):
        open_postgres_affect_store(pg_pool, schema=schema)


def test_schema_from_a_newer_release_is_refused(pg_dsn: str, pg_pool: Pool, schema: str) -> None:
    open_postgres_affect_store(pg_pool, schema=schema).close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("INSERT INTO {} (plane, version, name) VALUES ('affect', %s, 'future')").format(
                _q(schema, "ratatoskr_schema")
            ),
            (len(affect_migrations(schema)) + 1,),
        )
    with pytest.raises(SchemaTooNew):
        open_postgres_affect_store(pg_pool, schema=schema)


@pytest.mark.parametrize("name", ["", "Upper", "with-dash", "x" * 49, "1abc", 'q"uote'])
def test_bad_schema_names(pg_pool: Pool, name: str) -> None:
    with pytest.raises(ValueError, match="schema"):
        open_postgres_affect_store(pg_pool, schema=name)


@pytest.mark.parametrize("dim", [0, -1, True, 2.0, 16_001])
def test_bad_dimensions(pg_pool: Pool, schema: str, dim: Any) -> None:
    with pytest.raises(InvalidArguments):
        open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=dim)


def test_no_approximate_index_and_external_storage(pg_dsn: str, pg_pool: Pool, schema: str) -> None:
    """An HNSW/IVFFlat index would make the planner trade exactness for speed."""
    open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=4).close()
    methods = _rows(
        pg_dsn,
        sql.SQL(
            "SELECT DISTINCT am.amname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " JOIN pg_am am ON am.oid = c.relam JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s"
        ),
        (schema,),
    )
    assert methods == [("btree",)]
    storage = dict(
        _rows(
            pg_dsn,
            sql.SQL(
                "SELECT attname, attstorage FROM pg_attribute WHERE attrelid = %s::regclass"
                " AND attname IN ('record_json', 'embedding_f64', 'embedding_f32')"
            ),
            (f'"{schema}".memory_chunks',),
        )
    )
    assert storage == {"record_json": "e", "embedding_f64": "e", "embedding_f32": "e"}


def test_unreachable_server_is_unavailable_without_the_dsn_in_the_message() -> None:
    dsn = "postgresql://secretuser:secretpass@127.0.0.1:1/nodb"
    with pytest.raises(StorageUnavailable) as info:
        open_pool(dsn, PoolOptions(connect_timeout=1))
    text = str(info.value)
    assert "secret" not in text and "127.0.0.1" not in text
    assert info.value.__cause__ is None


def test_read_only_server_is_typed(pg_dsn: str, pg_pool: Pool, schema: str) -> None:
    open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=4).close()
    sep = "&" if "?" in pg_dsn else "?"
    ro_dsn = f"{pg_dsn}{sep}options=-c%20default_transaction_read_only%3Don"
    store = open_postgres_memory_store(ro_dsn, schema=schema, embedding_dim=4)
    try:
        assert store.search([1.0, 0.0, 0.0, 0.0], top_k=1) == []
        with pytest.raises(StorageReadOnly):
            store.upsert_many(
                [{"id": "x", "embedding": [1.0, 0.0, 0.0, 0.0], "scope": {}}],
                idempotency_key="k",
                ctx=CTX,
            )
    finally:
        store.close()


@pytest.mark.parametrize(
    ("sqlstate", "cls"),
    [
        ("53100", StorageFull),
        ("25006", StorageReadOnly),
        ("XX001", StorageCorrupt),
        ("57P01", StorageUnavailable),
        ("08006", StorageUnavailable),
        ("53300", StorageUnavailable),
        ("28P01", StorageUnavailable),
        ("23505", StorageError),
    ],
)
def test_driver_errors_map_to_typed_content_free_errors(sqlstate: str, cls: type) -> None:
    exc_cls = psycopg.errors.lookup(sqlstate)
    driver = exc_cls('Key (chunk_id)=(secret content) already exists on host "db.internal"')
    mapped = translate(driver)
    assert type(mapped) is cls
    assert "secret" not in mapped.message and "db.internal" not in mapped.message
    assert sqlstate in mapped.message


def test_closed_store_raises_unavailable(pg_pool: Pool, schema: str) -> None:
    store = open_postgres_affect_store(pg_pool, schema=schema)
    store.close()
    store.close()  # idempotent
    with pytest.raises(StorageUnavailable):
        store.get("k")


def test_store_survives_terminated_connections(pg_dsn: str, schema: str) -> None:
    opts = PoolOptions(min_size=3, max_size=3, application_name=f"term-{schema}")
    store = open_postgres_affect_store(pg_dsn, schema=schema, pool_options=opts)
    try:
        store.put_many([{"key": "k", "scope": {}}], idempotency_key="i", ctx=CTX)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            killed = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s",
                (opts.application_name,),
            ).fetchall()
        assert len(killed) == 3
        got = store.get("k")
        assert got is not None and got["revision"] == 1
        assert store.put_many([{"key": "k", "scope": {}}], idempotency_key="j", ctx=CTX) == {
            "written": 1,
            "replayed": False,
        }
    finally:
        store.close()


def test_on_table_binds_the_table_quoted_and_only_there() -> None:
    """Every fixed statement names its table through ``on_table``: psycopg quotes the
    schema and table (a schema name is configuration, never spliced as text), and
    the statement's own placeholders are left for the parameters."""
    table = sql.SQL("{}.{}").format(sql.Identifier('we"ird schema'), sql.Identifier("t"))
    statement = on_table(table, "SELECT 1 FROM {t} WHERE k = %s AND {t}.v > %s")
    rendered = statement.as_string(None)
    assert rendered == (
        'SELECT 1 FROM "we""ird schema"."t" WHERE k = %s AND "we""ird schema"."t".v > %s'
    )
