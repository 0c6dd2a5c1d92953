"""The replay file: one jti accepted once across every instance on the file, expiry,
bounded pruning, and checkpoints that keep the WAL small."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest

from bifrost.auth import TokenCache
from ratatoskr.sqlite import SqliteTokenCache, token_cache_path
from ratatoskr.sqlite.token_cache import PRUNE_BATCH


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "memory.db.replay")


def test_it_is_a_token_cache_and_a_jti_is_good_once_across_instances(path: str) -> None:
    a, b = SqliteTokenCache(path), SqliteTokenCache(path)
    try:
        assert isinstance(a, TokenCache)
        assert not b.seen("j1", now=0.0)
        assert a.check_and_add("j1", 100.0, now=0.0)
        assert b.seen("j1", now=1.0)
        assert not b.check_and_add("j1", 100.0, now=1.0)
        assert not a.check_and_add("j1", 100.0, now=2.0)
    finally:
        a.close()
        b.close()
    reopened = SqliteTokenCache(path)  # a restart remembers
    assert not reopened.check_and_add("j1", 100.0, now=3.0)
    # Past its expiry the entry counts as forgotten (its token is unacceptable anyway).
    assert not reopened.seen("j1", now=100.0)
    assert reopened.check_and_add("j1", 500.0, now=100.0)
    reopened.close()


def test_concurrent_admission_of_one_jti_admits_exactly_one(path: str) -> None:
    caches = [SqliteTokenCache(path) for _ in range(4)]
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def race(cache: SqliteTokenCache) -> None:
        barrier.wait()
        results.append(cache.check_and_add("same", time.time() + 300, time.time()))

    threads = [threading.Thread(target=race, args=(caches[i % 4],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in caches:
        c.close()
    assert sorted(results) == [False] * 7 + [True]


def test_calls_do_not_prune_and_the_prune_takes_the_callers_clock(path: str) -> None:
    cache = SqliteTokenCache(path)
    for i in range(2 * PRUNE_BATCH + 3):
        cache.check_and_add(f"old{i}", 10.0, now=0.0)
    cache.check_and_add("live", 1000.0, now=5.0)
    assert cache.prune() == 0  # nothing had expired at the newest call's time (5.0)
    assert cache.prune() == 0  # no call since
    cache.check_and_add("new", 1000.0, now=50.0)  # every old entry has expired
    assert len(cache) == 2 * PRUNE_BATCH + 5  # the call itself pruned nothing
    assert not cache.check_and_add("live", 1000.0, now=50.0)  # still remembered
    assert cache.prune() == 2 * PRUNE_BATCH + 3  # in batches, by the callers' 50.0
    assert len(cache) == 2
    assert cache.prune(now=2000.0) == 2
    cache.close()


def test_a_clock_stepping_back_does_not_prune_live_entries(path: str) -> None:
    """One call with the clock an hour ahead, then the clock steps back (NTP): the
    prune uses the latest call's time, so an entry live on today's clock stays and
    its token is still refused."""
    cache = SqliteTokenCache(path)
    assert cache.check_and_add("ahead", 3760.0, now=3700.0)
    assert cache.check_and_add("j2", 160.0, now=100.0)
    cache.prune()
    assert not cache.check_and_add("j2", 170.0, now=110.0)
    cache.check_and_add("later", 400.0, now=300.0)
    assert cache.prune() == 1  # j2, expired at 160 by the clock calls use now
    assert not cache.seen("j2", now=300.0) and cache.seen("ahead", now=300.0)
    cache.close()


def test_an_expired_entry_is_forgotten_before_it_is_pruned(path: str) -> None:
    cache = SqliteTokenCache(path)
    assert cache.check_and_add("j", 10.0, now=0.0)
    assert not cache.check_and_add("j", 20.0, now=5.0)
    assert not cache.seen("j", 11.0) and cache.check_and_add("j", 20.0, now=11.0)
    cache.close()


@pytest.mark.slow
def test_file_is_owner_only_and_the_wal_is_checkpointed(path: str) -> None:
    cache = SqliteTokenCache(path)
    now = time.time()
    for i in range(3000):
        cache.check_and_add(f"j{i}", now + 300, now)
    deadline = time.monotonic() + 10
    wal = path + "-wal"
    while time.monotonic() < deadline:
        # A checkpointed WAL restarts from its start at the next commit: it stops growing.
        before = os.path.getsize(wal)
        cache.check_and_add(f"probe{time.monotonic()}", now + 300, now)
        time.sleep(1.2)
        cache.check_and_add(f"probe{time.monotonic()}", now + 300, now)
        if os.path.getsize(wal) <= before:
            break
    else:
        pytest.fail("the replay WAL kept growing: no checkpoint ran")
    for name in (path, wal):
        assert stat.S_IMODE(os.stat(name).st_mode) == 0o600
    cache.close()


def test_token_cache_path_is_beside_the_real_plane_file(tmp_path: Path) -> None:
    real = tmp_path / "data" / "memory.db"
    real.parent.mkdir()
    real.touch()
    link = tmp_path / "link.db"
    link.symlink_to(real)
    assert token_cache_path(str(link)) == str(real) + ".replay"
    with pytest.raises(ValueError, match="in-memory"):
        token_cache_path(":memory:")
