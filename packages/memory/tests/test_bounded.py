"""Bounded files: the idempotency ledger and the tombstones are pruned by the writes
themselves (bounded work per write), and an index that fell behind the tombstone
horizon reloads instead of missing deletes."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import apsw
import pytest

from bifrost.context import DispatchContext
from bifrost.errors import InvalidArguments, RevisionMismatch
from ratatoskr.memory import RatatoskrMemoryStore, changes, open_memory_store
from ratatoskr.memory.sync import SyncedIndex
from ratatoskr.sqlite.ledger import PRUNE_PER_WRITE

from .conftest import DIM, chunk, vec

CTX = DispatchContext(actor="agent-1")
EPHEMERAL_TTL = 15 * 60


def scalar(store: RatatoskrMemoryStore, sql: str) -> int:
    with store.database.read() as conn:
        return int(conn.execute(sql).fetchall()[0][0])  # type: ignore[arg-type]


def ledger_size(store: RatatoskrMemoryStore) -> int:
    return scalar(store, "SELECT count(*) FROM memory_idempotency")


def tombstones(store: RatatoskrMemoryStore) -> list[tuple[str, int]]:
    """The tombstones, each digest named by the id ``c<n>`` (n < 1000) it is of."""
    with store.database.read() as conn:
        secret = changes.key(conn)
        names = {changes.digest(secret, f"c{i}"): f"c{i}" for i in range(1000)}
        return [
            (names.get(bytes(d), "?"), int(seq))
            for d, seq in conn.execute("SELECT digest, seq FROM memory_tombstones ORDER BY seq")
        ]


def horizon(store: RatatoskrMemoryStore) -> int:
    with store.database.read() as conn:
        return changes.horizon(conn)


# -- the ledger -------------------------------------------------------------------


def test_expired_ledger_entries_are_pruned_a_bounded_number_per_write(db_file: str) -> None:
    now = [1000.0]
    s = open_memory_store(db_file, embedding_dim=DIM, clock=lambda: now[0])
    calls = 3 * PRUNE_PER_WRITE
    for i in range(calls):
        s.upsert_many(
            [chunk(f"c{i}", i)], idempotency_key=f"k{i}", ctx=CTX, idempotency_class="ephemeral"
        )
    assert ledger_size(s) == calls
    now[0] += EPHEMERAL_TTL + 1  # every entry has expired
    sizes = []
    for i in range(4):
        s.upsert_many([], idempotency_key=f"later{i}", ctx=CTX)
        sizes.append(ledger_size(s))
    # Each write drops at most PRUNE_PER_WRITE expired entries and adds its own.
    assert sizes == [
        calls - PRUNE_PER_WRITE + 1,
        calls - 2 * PRUNE_PER_WRITE + 2,
        3,
        4,
    ]
    s.close()


@pytest.mark.slow
def test_the_ledger_stays_within_the_ttl_window(db_file: str) -> None:
    now = [0.0]
    s = open_memory_store(db_file, embedding_dim=DIM, clock=lambda: now[0])
    per_window = 50  # calls per TTL
    for i in range(10 * per_window):
        s.upsert_many(
            [chunk("a", i)], idempotency_key=f"k{i}", ctx=CTX, idempotency_class="ephemeral"
        )
        now[0] += EPHEMERAL_TTL / per_window
    assert ledger_size(s) <= per_window + 1
    s.close()


def test_a_failed_write_prunes_nothing(db_file: str) -> None:
    now = [1000.0]
    s = open_memory_store(db_file, embedding_dim=DIM, clock=lambda: now[0])
    for i in range(5):
        s.upsert_many(
            [chunk("a", i)], idempotency_key=f"k{i}", ctx=CTX, idempotency_class="ephemeral"
        )
    now[0] += EPHEMERAL_TTL + 1
    with pytest.raises(RevisionMismatch):
        s.upsert_many([chunk("a", 9)], idempotency_key="x", ctx=CTX, expected_revisions={"a": 1})
    assert ledger_size(s) == 5
    s.close()


# -- tombstones -------------------------------------------------------------------


def test_tombstones_are_kept_for_the_retention_window_only(db_file: str) -> None:
    retention = 5
    s = open_memory_store(db_file, embedding_dim=DIM, tombstone_retention=retention)
    s.upsert_many([chunk(f"c{i}", i) for i in range(40)], idempotency_key="fill", ctx=CTX)
    for i in range(30):
        s.delete_many([f"c{i}"])  # seq 2..31
        with s.database.read() as conn:
            seq = changes.seq(conn)
        kept = tombstones(s)
        assert all(t_seq > seq - retention for _, t_seq in kept)
        assert len(kept) == min(i + 1, retention)
    # Pruned through seq 31 - 5 = 26: every later tombstone is kept.
    assert horizon(s) == 26
    assert [cid for cid, _ in tombstones(s)] == ["c25", "c26", "c27", "c28", "c29"]
    s.close()


def test_upserts_prune_too_and_the_work_per_write_is_bounded(db_file: str) -> None:
    s = open_memory_store(db_file, embedding_dim=DIM, tombstone_retention=1)
    n = 3 * changes.PRUNE_PER_WRITE
    s.upsert_many([chunk(f"c{i}", i) for i in range(n)], idempotency_key="fill", ctx=CTX)
    with s.database.write() as conn:  # a backlog, as an upgraded file would hold
        changes.bury(conn, [f"gone{i}" for i in range(n)], 1)
    left = []
    for i in range(4):
        s.upsert_many([chunk(f"n{i}", i)], idempotency_key=f"u{i}", ctx=CTX)
        left.append(len(tombstones(s)))
    assert left == [n - 64, n - 128, 0, 0]
    s.delete_many([f"c{i}" for i in range(100)])  # adds 100, drops them at the next write
    assert len(tombstones(s)) == 100
    s.upsert_many([chunk("x", 1)], idempotency_key="x", ctx=CTX)
    assert len(tombstones(s)) == 100 - changes.PRUNE_PER_WRITE  # an upsert adds none
    s.upsert_many([chunk("y", 1)], idempotency_key="y", ctx=CTX)
    assert tombstones(s) == []
    s.close()


def test_a_bad_retention_or_scope_cap_is_refused_before_the_file_is_made(tmp_path: Path) -> None:
    for kw in ({"tombstone_retention": 0}, {"tombstone_retention": True}, {"max_scope_any": 0}):
        path = tmp_path / "never.db"
        with pytest.raises(InvalidArguments):
            open_memory_store(str(path), embedding_dim=DIM, **kw)
        assert not path.exists()


# -- catching up across the horizon ---------------------------------------------------


def corpus(n: int, seed: int = 4) -> list[dict[str, Any]]:
    return [chunk(f"m{i:03d}", seed * 1000 + i, {"tenant": f"t{i % 2}"}) for i in range(n)]


def answers(store: RatatoskrMemoryStore) -> list[list[tuple[str, float, int]]]:
    rng = random.Random(11)
    out = []
    for _ in range(12):
        q = [rng.uniform(-1, 1) for _ in range(DIM)]
        for scope in (None, {"tenant": "t1"}):
            rows = store.search(q, top_k=5, scope_all=scope)
            out.append([(r["chunk_id"], r["score"], r["revision"]) for r in rows])
    return out


def fall_behind(
    db: str, retention: int, deletes: int
) -> tuple[RatatoskrMemoryStore, RatatoskrMemoryStore]:
    """``a`` writes a corpus; ``b`` (same file) indexes it; then ``a`` deletes one chunk
    per write, ``deletes`` times, while ``b`` is idle. Only deletes: ``b`` sees no
    changed row at all, so only the tombstones can tell it what went."""
    a = open_memory_store(db, embedding_dim=DIM, tombstone_retention=retention)
    a.upsert_many(corpus(60), idempotency_key="fill", ctx=CTX)
    b = open_memory_store(db, embedding_dim=DIM, tombstone_retention=retention)
    assert len(b.search(vec(1), top_k=100)) == 60
    for i in range(deletes):
        a.delete_many([f"m{2 * i:03d}"])
    return a, b


def test_an_index_behind_the_horizon_reloads_and_answers_like_a_fresh_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "shared.db")
    a, b = fall_behind(db, retention=5, deletes=25)
    assert horizon(a) > 1  # b's index (seq 1) is behind it
    reloads: list[int] = []
    real = SyncedIndex._reload

    def counting(self: SyncedIndex, conn: apsw.Connection, db_seq: int) -> None:
        reloads.append(db_seq)
        real(self, conn, db_seq)

    monkeypatch.setattr(SyncedIndex, "_reload", counting)
    got = answers(b)
    assert reloads == [26]
    fresh = open_memory_store(db, embedding_dim=DIM)
    assert got == answers(fresh)
    assert len(b.search(vec(1), top_k=100)) == 35 == fresh.count()
    for s in (a, b, fresh):
        s.close()


def test_without_the_horizon_check_the_same_index_would_miss_deletes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scenario above is sharp: an index that catches up from pruned tombstones
    keeps deleted chunks and answers short."""
    db = str(tmp_path / "shared.db")
    a, b = fall_behind(db, retention=5, deletes=25)
    monkeypatch.setattr(changes, "horizon", lambda conn: 0)
    fresh = open_memory_store(db, embedding_dim=DIM)
    assert answers(b) != answers(fresh)
    for s in (a, b, fresh):
        s.close()


def test_an_index_within_the_window_catches_up_without_reloading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "shared.db")
    a, b = fall_behind(db, retention=50, deletes=25)
    assert horizon(a) == 0
    fresh = open_memory_store(db, embedding_dim=DIM)
    monkeypatch.setattr(SyncedIndex, "_reload", lambda *args: pytest.fail("reloaded"))
    assert answers(b) == answers(fresh)
    for s in (a, b, fresh):
        s.close()


def test_tombstone_table_size_after_many_deletes(db_file: str) -> None:
    """The table holds at most the tombstones of the retention window."""
    retention = 20
    s = open_memory_store(db_file, embedding_dim=DIM, tombstone_retention=retention)
    for r in range(10):
        s.upsert_many([chunk(f"r{r}-{i}", i) for i in range(30)], idempotency_key=f"f{r}", ctx=CTX)
        for i in range(0, 30, 3):
            s.delete_many([f"r{r}-{i}", f"r{r}-{i + 1}"])
    # 110 writes, 200 deletes: the window of 20 counter values holds at most 2 per write.
    assert len(tombstones(s)) <= 2 * retention
    floor = scalar(s, "SELECT value FROM memory_counters WHERE name = 'seq'") - retention
    assert floor - 1 <= horizon(s) <= floor
    s.close()
