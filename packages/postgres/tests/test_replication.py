"""The synchronous-standby check, reads routed to a replica, and the typed 503.

A primary and a synchronous standby (``ratatoskr.postgres.cluster``, the pinned
wheel's binaries) for the module; the session's plain server (no standby) for
the refusal.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from bifrost.context import DispatchContext
from bifrost.errors import render_error
from ratatoskr.memory.postgres import PostgresMemoryStore, open_postgres_memory_store
from ratatoskr.postgres import Pool, PoolOptions, StorageUnavailable, open_pool
from ratatoskr.postgres.cluster import Pair, start_pair
from ratatoskr.postgres.database import PoolRunner
from ratatoskr.postgres.replica import ReadReplica
from ratatoskr.postgres.replication import (
    ReplicationStatus,
    check_synchronous_standby,
    replication_status,
)

pytestmark = pytest.mark.slow
DIM = 4
GRANT = {"tenant": "acme"}
CTX = DispatchContext(actor="agent", scope=GRANT, verb="upsert_many")


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    pair = start_pair(synchronous=True, durable=False)
    try:
        yield pair
    finally:
        pair.close()


@pytest.fixture
def store(pair: Pair) -> Iterator[PostgresMemoryStore]:
    """A memory store on the pair's primary, in a schema of its own, reads routed to
    the standby."""
    s = open_postgres_memory_store(
        pair.dsn(), schema=f"r_{uuid.uuid4().hex[:12]}", embedding_dim=DIM
    )
    s.database.use_replica(
        ReadReplica(open_pool(pair.standby.dsn(), PoolOptions(max_size=2)), owns_pool=True)
    )
    yield s
    s.close()


def chunk(cid: str, i: int) -> dict[str, Any]:
    emb = [1.0 if d == i % DIM else 0.1 for d in range(DIM)]
    return {"id": cid, "embedding": emb, "scope": GRANT, "content": f"{cid} body"}


def replica_of(store: PostgresMemoryStore) -> ReadReplica:
    replica = store.database.replica
    assert replica is not None
    return replica


def standby_sql(pair: Pair, statement: str) -> None:
    with psycopg.connect(pair.standby.dsn(), autocommit=True) as conn:
        conn.execute(statement.encode())


# -- the synchronous-standby check ---------------------------------------------------


def test_a_synchronous_standby_passes_the_check(pair: Pair) -> None:
    with open_pool(pair.dsn()) as pool:
        status = check_synchronous_standby(PoolRunner(pool), require=True)
    assert status == ReplicationStatus("*", "on", 1)
    assert status.problem is None


def test_a_server_without_a_standby_is_refused_or_warned_about(
    pg_pool: Pool, caplog: pytest.LogCaptureFixture
) -> None:
    runner = PoolRunner(pg_pool)
    with pytest.raises(StorageUnavailable, match=r"no synchronous standby.*the hint"):
        check_synchronous_standby(runner, require=True, hint="the hint")
    with caplog.at_level(logging.WARNING, logger="ratatoskr.postgres"):
        status = check_synchronous_standby(runner, require=False, what="schema s")
    assert status.synchronous_standbys == 0
    assert "schema s: the database has no synchronous standby" in caplog.text


@pytest.mark.parametrize(
    ("status", "problem"),
    [
        (ReplicationStatus("*", "remote_apply", 1), None),
        (ReplicationStatus("FIRST 1 (a, b)", "on", None), None),  # unseen: the settings say
        (ReplicationStatus("", "on", 0), "synchronous_standby_names is empty"),
        (ReplicationStatus("*", "local", 1), "synchronous_commit is local"),
        (ReplicationStatus("*", "remote_write", 1), "synchronous_commit is remote_write"),
        (ReplicationStatus("*", "on", 0), "no synchronous standby is connected"),
    ],
)
def test_what_counts_as_durable(status: ReplicationStatus, problem: str | None) -> None:
    if problem is None:
        assert status.problem is None
    else:
        assert status.problem is not None and problem in status.problem


def test_the_status_reads_this_sessions_settings(pair: Pair) -> None:
    with psycopg.connect(pair.dsn(), autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SET synchronous_commit = off")
        assert replication_status(cur).synchronous_commit == "off"


# -- reads from the replica ----------------------------------------------------------


def test_reads_go_to_the_replica_and_answer_as_the_primary(
    store: PostgresMemoryStore, pair: Pair
) -> None:
    store.upsert_many([chunk(f"c{i}", i) for i in range(8)], idempotency_key="k", ctx=CTX)
    replica = replica_of(store)
    got = store.get_many(["c1", "c5"])
    hits = store.search([1.0, 0.1, 0.1, 0.1], top_k=3, scope_all=GRANT)
    assert replica.served == 2 and replica.fell_back == 0
    assert [g["id"] for g in got] == ["c1", "c5"]
    store.database._replica = None  # the same reads on the primary
    try:
        assert store.get_many(["c1", "c5"]) == got
        assert store.search([1.0, 0.1, 0.1, 0.1], top_k=3, scope_all=GRANT) == hits
    finally:
        store.database._replica = replica


def test_a_replica_behind_never_hides_an_acknowledged_write(
    store: PostgresMemoryStore, pair: Pair
) -> None:
    store.upsert_many([chunk("old", 0)], idempotency_key="k0", ctx=CTX)
    replica = replica_of(store)
    replica.max_wait = 0.02
    standby_sql(pair, "SELECT pg_wal_replay_pause()")
    try:
        # Committed on the standby's disk (synchronous_commit=on), not yet visible there.
        store.upsert_many([chunk("new", 1)], idempotency_key="k1", ctx=CTX)
        assert [g["id"] for g in store.get_many(["old", "new"])] == ["old", "new"]
        hits = store.search([0.1, 1.0, 0.1, 0.1], top_k=1, scope_all=GRANT)
        assert [h["chunk_id"] for h in hits] == ["new"]
        assert replica.fell_back == 2 and replica.served == 0
    finally:
        standby_sql(pair, "SELECT pg_wal_replay_resume()")
    replica.max_wait = 5.0  # caught up soon after: served there again
    assert [g["id"] for g in store.get_many(["new"])] == ["new"]
    assert replica.served == 1


def test_a_replica_that_is_no_standby_or_unreachable_leaves_reads_to_the_primary(
    store: PostgresMemoryStore, pair: Pair
) -> None:
    store.upsert_many([chunk("a", 0)], idempotency_key="k", ctx=CTX)
    # A "replica" that is a primary (a promoted standby, perhaps stale): never read.
    not_standby = ReadReplica(open_pool(pair.primary.dsn()), owns_pool=True, max_wait=0)
    store.database.use_replica(not_standby)
    assert [g["id"] for g in store.get_many(["a"])] == ["a"]
    assert (not_standby.served, not_standby.fell_back) == (0, 1)
    # One nobody answers at: the call waits out the pool's timeout, then the primary.
    gone = pair.primary.dsn().replace(str(pair.primary.port), "1")
    unreachable = ReadReplica(
        open_pool(gone, PoolOptions(min_size=0, timeout=0.5, connect_timeout=1)), owns_pool=True
    )
    store.database.use_replica(unreachable)
    assert [g["id"] for g in store.get_many(["a"])] == ["a"]
    assert (unreachable.served, unreachable.fell_back) == (0, 1)
    not_standby.close()


def test_closing_the_database_closes_the_replica_it_owns(pair: Pair) -> None:
    s = open_postgres_memory_store(
        pair.dsn(), schema=f"r_{uuid.uuid4().hex[:12]}", embedding_dim=DIM
    )
    pool = open_pool(pair.standby.dsn(), PoolOptions(max_size=1))
    s.database.use_replica(ReadReplica(pool, owns_pool=True))
    s.close()
    assert pool.closed


# -- the wire: a database gone is a typed, retryable 503 -----------------------------


def test_storage_unavailable_is_a_503_on_the_wire() -> None:
    status, body = render_error(
        StorageUnavailable("the database server cannot be reached"), plane="memory", call_id="c"
    )
    assert status == 503
    assert body["error"]["code"] == "bifrost.unavailable"
    assert body["error"]["message"] == "the database server cannot be reached"


def test_a_dsns_own_connect_timeout_wins(pair: Pair) -> None:
    with open_pool(pair.dsn() + "&connect_timeout=3") as pool:
        assert isinstance(pool.kwargs, dict) and "connect_timeout" not in pool.kwargs
    with open_pool(pair.dsn()) as pool:
        assert isinstance(pool.kwargs, dict) and pool.kwargs["connect_timeout"] == 10
