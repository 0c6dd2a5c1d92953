"""The bound on a write's wait for the synchronous standby, the write slots, and the
readiness question, on a real primary whose synchronous standby is stopped.

One primary + synchronous standby for the module; each test that stops the standby
starts it again.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from ratatoskr.postgres import PoolOptions, StorageUnavailable, open_pool
from ratatoskr.postgres.cluster import Pair, start_pair
from ratatoskr.postgres.database import PoolRunner
from ratatoskr.postgres.replication import (
    STANDBY_NOT_CONNECTED,
    CommitsBlocked,
    ReplicationStatus,
    check_commits_complete,
    required_standbys,
)
from ratatoskr.postgres.syncwait import SyncStandbyTimeout, Watchdog, watched, write_slots_for

pytestmark = pytest.mark.slow
WAIT = 0.5


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    p = start_pair(synchronous=True, durable=False)
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
def runner(pair: Pair) -> Iterator[PoolRunner]:
    table = f"t_{uuid.uuid4().hex[:10]}"
    pool = open_pool(pair.dsn(), PoolOptions(max_size=4, timeout=5))
    r = PoolRunner(pool, owns_pool=True)
    r.sync_wait = WAIT

    def create(cur: psycopg.Cursor[Any]) -> None:
        # Whether or not the standby is up yet (fixtures' order): a local commit.
        cur.execute("SET LOCAL synchronous_commit = local")
        cur.execute(f"CREATE TABLE {table} (id text PRIMARY KEY)")

    r.run(create, mode="write", bound="none")
    r.table = table  # type: ignore[attr-defined]
    yield r
    r.close()


@pytest.fixture
def standby_down(pair: Pair) -> Iterator[None]:
    pair.standby.stop("fast")
    try:
        yield
    finally:
        pair.standby.start()
        _wait_sync(pair)


def _wait_sync(pair: Pair) -> None:
    deadline = time.monotonic() + 30
    with psycopg.connect(pair.primary.dsn(), autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"
            ).fetchone()
            if row is not None and row[0]:
                return
            time.sleep(0.05)
    raise AssertionError("the standby did not come back")


def insert(r: PoolRunner, key: str) -> Any:
    table = r.table  # type: ignore[attr-defined]
    return lambda cur: cur.execute(f"INSERT INTO {table} VALUES (%s)", (key,))


def present(pair: Pair, r: PoolRunner, key: str) -> bool:
    table = r.table  # type: ignore[attr-defined]
    with psycopg.connect(pair.primary.dsn(), autocommit=True) as conn:
        return conn.execute(f"SELECT 1 FROM {table} WHERE id = %s", (key,)).fetchone() is not None


@pytest.mark.parametrize(
    ("names", "n"),
    [("", 0), ("*", 1), ("a, b", 1), ("2 (a, b)", 2), ("FIRST 2 (a, b)", 2), ("any 3 (a,b,c)", 3)],
)
def test_required_standbys(names: str, n: int) -> None:
    assert required_standbys(names) == n


def test_missing_standbys_counts_against_what_the_server_asks() -> None:
    assert ReplicationStatus("FIRST 2 (a, b)", "on", 1).missing_standbys
    assert not ReplicationStatus("ANY 1 (a, b)", "remote_apply", 1).missing_standbys
    assert not ReplicationStatus("*", "local", 0).missing_standbys  # commits do not wait
    assert not ReplicationStatus("*", "on", None).missing_standbys  # unseen by this role


def test_write_slots_keep_part_of_the_pool() -> None:
    assert [write_slots_for(n) for n in (1, 2, 4, 8, 16)] == [1, 1, 3, 6, 12]


@pytest.mark.usefixtures("standby_down")
def test_a_write_is_cut_off_not_acknowledged_yet_committed_on_the_primary(
    pair: Pair, runner: PoolRunner
) -> None:
    for bound in ("waits", "call"):
        t0 = time.monotonic()
        with pytest.raises(SyncStandbyTimeout, match="not acknowledged"):
            runner.run(insert(runner, bound), mode="write", bound=bound)
        assert WAIT * 0.9 <= time.monotonic() - t0 <= WAIT + 1.0
        assert present(pair, runner, bound)  # the cancelled wait kept the local commit
    assert runner.unconfirmed_since is not None
    with pytest.raises(CommitsBlocked, match=STANDBY_NOT_CONNECTED):
        check_commits_complete(runner)
    # The connections the cancels were sent on are gone; the pool serves on.
    assert runner.run(lambda cur: cur.execute("SELECT 1").fetchone()) == (1,)


@pytest.mark.usefixtures("standby_down")
def test_reads_are_served_while_every_write_slot_waits(runner: PoolRunner) -> None:
    runner.sync_wait = 3.0
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            runner.run(insert(runner, f"w{i}"), mode="write", bound="call")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(runner.write_slots + 2)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    assert runner.run(lambda cur: cur.execute("SELECT 1").fetchone(), wait=1.0) == (1,)
    assert time.monotonic() - t0 < 0.5
    for t in threads:
        t.join(10)
    assert len(errors) == runner.write_slots + 2
    assert all(isinstance(e, StorageUnavailable) for e in errors)


@pytest.mark.usefixtures("standby_down")
def test_a_lock_held_by_a_write_waiting_for_the_standby_bounds_the_next(
    pair: Pair, runner: PoolRunner
) -> None:
    # A write stuck in its commit (no bound) holds its row; a bounded write of the same
    # row gives up after its lock wait (lock_timeout), rolled back.
    with psycopg.connect(pair.primary.dsn(), autocommit=True) as stuck:
        table = runner.table  # type: ignore[attr-defined]
        stuck.execute("BEGIN")
        stuck.execute(f"INSERT INTO {table} VALUES ('row')")
        held = threading.Thread(target=lambda: stuck.execute("COMMIT"))
        held.start()
        time.sleep(0.2)
        t0 = time.monotonic()
        with pytest.raises(StorageUnavailable, match="waited too long for a lock"):
            runner.run(insert(runner, "row"), mode="write")
        assert time.monotonic() - t0 < WAIT + 1.0
        stuck.cancel_safe()
        held.join(10)


def test_a_watch_finished_in_time_never_fires(pair: Pair) -> None:
    dog = Watchdog()
    with psycopg.connect(pair.primary.dsn(), autocommit=True) as conn:
        for _ in range(50):
            with watched(conn, 0.05, dog):
                conn.execute("SELECT 1")
        time.sleep(0.2)  # every deadline passed: nothing may cancel the next statement
        assert conn.execute("SELECT pg_sleep(0.1), 1").fetchone() == ("", 1)
        assert not conn.closed
    dog.stop()


def test_with_the_standby_connected_commits_complete(runner: PoolRunner) -> None:
    assert check_commits_complete(runner).synchronous_standbys == 1
    runner.run(insert(runner, "ok"), mode="write", bound="call")
    assert runner.unconfirmed_since is None
