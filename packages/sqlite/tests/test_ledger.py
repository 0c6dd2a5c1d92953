"""The idempotency ledger: lookup, expiry, replacement, pruning."""

from __future__ import annotations

import pytest

from ratatoskr.sqlite import Database, IdempotencyLedger, Migration
from ratatoskr.sqlite.ledger import PRUNE_PER_WRITE

LEDGER = IdempotencyLedger("test_idempotency")


@pytest.fixture
def db() -> Database:
    return Database(":memory:", plane="t", migrations=[Migration(1, "l", LEDGER.create_sql())])


def test_record_then_lookup(db: Database) -> None:
    with db.write() as conn:
        LEDGER.record(conn, "k", digest="d", result={"n": 1}, expires_at=100.0)
    with db.read() as conn:
        entry = LEDGER.lookup(conn, "k", now=50.0)
    assert entry is not None
    assert (entry.digest, entry.result, entry.expires_at) == ("d", {"n": 1}, 100.0)


def test_expired_entry_counts_as_absent_and_can_be_replaced(db: Database) -> None:
    with db.write() as conn:
        LEDGER.record(conn, "k", digest="d1", result=1, expires_at=100.0)
    with db.read() as conn:
        assert LEDGER.lookup(conn, "k", now=100.0) is None
    with db.write() as conn:
        LEDGER.record(conn, "k", digest="d2", result=2, expires_at=300.0)
    with db.read() as conn:
        entry = LEDGER.lookup(conn, "k", now=150.0)
    assert entry is not None and entry.digest == "d2"


def test_prune_drops_only_expired(db: Database) -> None:
    with db.write() as conn:
        for i in range(5):
            LEDGER.record(conn, f"old{i}", digest="d", result=None, expires_at=10.0)
        LEDGER.record(conn, "live", digest="d", result=None, expires_at=1000.0)
    with db.write() as conn:
        assert LEDGER.prune(conn, now=20.0, limit=3) == 3
        assert LEDGER.prune(conn, now=20.0) == 2
        assert LEDGER.prune(conn, now=20.0) == 0
    with db.read() as conn:
        assert LEDGER.lookup(conn, "live", now=20.0) is not None


def test_table_name_must_be_an_identifier() -> None:
    with pytest.raises(ValueError, match="identifier"):
        IdempotencyLedger("x; DROP TABLE y")


def test_prune_is_bounded_per_write_and_oldest_first(db: Database) -> None:
    with db.write() as conn:
        for i in range(PRUNE_PER_WRITE + 10):
            LEDGER.record(conn, f"old{i:03d}", digest="d", result=None, expires_at=10.0 + i)
    with db.write() as conn:
        assert LEDGER.prune(conn, now=1000.0) == PRUNE_PER_WRITE  # the shared default
    with db.read() as conn:
        left = sorted(
            str(r[0]) for r in conn.execute("SELECT idempotency_id FROM test_idempotency")
        )
    assert left == [f"old{i:03d}" for i in range(PRUNE_PER_WRITE, PRUNE_PER_WRITE + 10)]


def test_prune_reads_the_expiry_index(db: Database) -> None:
    with db.write() as conn:
        conn.execute("DROP INDEX test_idempotency_expiry")
        conn.execute(LEDGER.index_sql())
        conn.execute(LEDGER.index_sql())  # idempotent, for a migration that adds it
    with db.read() as conn:
        plan = " ".join(
            str(row[-1])
            for row in conn.execute(
                "EXPLAIN QUERY PLAN SELECT idempotency_id FROM test_idempotency"
                " WHERE expires_at <= ? ORDER BY expires_at LIMIT ?",
                (1.0, PRUNE_PER_WRITE),
            )
        )
    assert "test_idempotency_expiry" in plan


def test_within_is_the_ledger_inside_one_transaction(db: Database) -> None:
    """The shape of bifrost's write-path ledger: the same methods, without ``conn``."""
    with db.write() as conn:
        ledger = LEDGER.within(conn)
        ledger.record("old", digest="d", result=None, expires_at=10.0)
        ledger.record("k", digest="d", result={"n": 1}, expires_at=100.0)
        entry = ledger.lookup("k", now=50.0)
        assert entry is not None and (entry.digest, entry.result) == ("d", {"n": 1})
        assert ledger.lookup("k", now=100.0) is None
        assert ledger.prune(now=20.0) == 1
    with db.read() as conn:
        assert LEDGER.lookup(conn, "k", now=50.0) is not None  # committed with the write
        assert LEDGER.lookup(conn, "old", now=0.0) is None


def test_within_rolls_back_with_its_transaction(db: Database) -> None:
    with pytest.raises(RuntimeError, match="abort"), db.write() as conn:
        LEDGER.within(conn).record("k", digest="d", result=1, expires_at=100.0)
        raise RuntimeError("abort")
    with db.read() as conn:
        assert LEDGER.lookup(conn, "k", now=0.0) is None
