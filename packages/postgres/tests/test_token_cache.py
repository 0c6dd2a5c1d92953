"""The PostgreSQL token cache: a ``jti`` is accepted once for every process, pool and
reconnect; expiry, bounded pruning, odd ``jti`` values, and bifrost's verifier using it."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from bifrost.auth.token_cache import TokenCache
from bifrost.auth.verifier import JwtVerifier
from ratatoskr.memory.postgres import open_postgres_memory_store
from ratatoskr.postgres import Pool, PoolOptions, PostgresTokenCache
from ratatoskr.postgres.token_cache import PRUNE_BATCH

NOW = 1_800_000_000.0


@pytest.fixture
def app_name() -> str:
    return f"replay-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def caches(pg_dsn: str, schema: str, app_name: str) -> Iterator[list[PostgresTokenCache]]:
    """Two caches of one schema, each with a pool of its own (two provider processes)."""
    opts = PoolOptions(min_size=2, max_size=4, application_name=app_name)
    made = [PostgresTokenCache(pg_dsn, schema=schema, pool_options=opts) for _ in range(2)]
    yield made
    for c in made:
        c.close()


def test_is_a_bifrost_token_cache(caches: list[PostgresTokenCache]) -> None:
    assert isinstance(caches[0], TokenCache)
    verifier = JwtVerifier(b"k" * 32, audience="ratatoskr", token_cache=caches[0])
    assert verifier.token_cache is caches[0]


def test_single_use_across_two_pools(caches: list[PostgresTokenCache]) -> None:
    a, b = caches
    assert not a.seen("j1", NOW)
    assert a.check_and_add("j1", NOW + 60, NOW) is True
    assert b.seen("j1", NOW)
    assert b.check_and_add("j1", NOW + 60, NOW) is False
    assert a.check_and_add("j1", NOW + 60, NOW + 1) is False
    assert b.check_and_add("j2", NOW + 60, NOW) is True


def test_concurrent_check_and_add_accepts_once(caches: list[PostgresTokenCache]) -> None:
    for r in range(5):
        barrier = threading.Barrier(8)
        results: list[bool] = [False] * 8

        def run(
            i: int, r: int = r, barrier: threading.Barrier = barrier, out: list[bool] = results
        ) -> None:
            barrier.wait()
            out[i] = caches[i % 2].check_and_add(f"race-{r}", NOW + 60, NOW)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == [False] * 7 + [True]


def test_expiry(caches: list[PostgresTokenCache]) -> None:
    a, b = caches
    assert a.check_and_add("e", NOW + 10, NOW)
    assert b.seen("e", NOW + 9.9)
    assert not b.seen("e", NOW + 10)  # at expires_at it counts as forgotten
    assert b.check_and_add("e", NOW + 20, NOW + 10) is True
    assert a.check_and_add("e", NOW + 30, NOW + 19) is False


def test_pruning_is_bounded(caches: list[PostgresTokenCache]) -> None:
    a = caches[0]
    for i in range(PRUNE_BATCH * 2 + 10):
        assert a.check_and_add(f"old{i}", NOW + 1, NOW)
    before = len(a)
    assert a.check_and_add("fresh", NOW + 100, NOW + 50)
    assert len(a) == before + 1 - PRUNE_BATCH
    for i in range(3):
        a.check_and_add(f"more{i}", NOW + 100, NOW + 50)
    assert len(a) == 4  # the expired rows went 64 a call; the live ones stayed


def test_odd_jti_values_are_distinct(caches: list[PostgresTokenCache]) -> None:
    a, b = caches
    odd = ["x\x00", "x\x01", "x", "x\x01\x01", "\ud800", "\udfff", "\x01\x03" + "ed a0 80", "ü"]
    for jti in odd:
        assert a.check_and_add(jti, NOW + 60, NOW) is True, repr(jti)
    for jti in odd:
        assert b.seen(jti, NOW), repr(jti)
        assert b.check_and_add(jti, NOW + 60, NOW) is False, repr(jti)


def _terminate(pg_dsn: str, app_name: str) -> int:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (app_name,),
        ).fetchall()
    return len(rows)


def test_survives_reconnect(caches: list[PostgresTokenCache], pg_dsn: str, app_name: str) -> None:
    a, b = caches
    assert a.check_and_add("before", NOW + 60, NOW)
    assert b.seen("before", NOW)  # b has connections too
    assert _terminate(pg_dsn, app_name) >= 2  # every pooled connection of both caches
    # The dead pooled connections are found and replaced; nothing was forgotten.
    assert a.check_and_add("before", NOW + 60, NOW) is False
    assert b.check_and_add("before", NOW + 60, NOW) is False
    assert b.seen("before", NOW)
    assert a.check_and_add("after", NOW + 60, NOW) is True
    assert b.check_and_add("after", NOW + 60, NOW) is False


def test_shares_a_schema_and_pool_with_its_plane(pg_pool: Pool, schema: str) -> None:
    store = open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=4)
    cache = PostgresTokenCache(pg_pool, schema=schema)
    assert cache.check_and_add("j", NOW + 60, NOW)
    assert store.health()["status"] == "ok"
    cache.close()
    store.close()
    # Neither closed the shared pool.
    with pg_pool.connection() as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
