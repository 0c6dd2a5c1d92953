"""Group commit (ratatoskr.sqlite.group): concurrent batches share one COMMIT, each
atomic on its own; a COMMIT that fails acknowledges none of its group."""

from __future__ import annotations

import functools
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import apsw
import pytest

from ratatoskr.sqlite import (
    ConnectionOptions,
    Database,
    Migration,
    StorageFull,
    StorageUnavailable,
    Written,
)
from ratatoskr.sqlite.crashtest import kill_mid_stream
from ratatoskr.sqlite.grouptest import run_grouped
from ratatoskr.sqlite.guard import free_bytes

MIGRATIONS = [
    Migration(
        1,
        "items",
        "CREATE TABLE items (id TEXT PRIMARY KEY, batch INTEGER NOT NULL, body TEXT NOT NULL)",
    )
]
WRITER = Path(__file__).with_name("group_writer.py")


def open_db(path: Path | str, **options: Any) -> Database:
    return Database(
        str(path), plane="test", migrations=MIGRATIONS, options=ConnectionOptions(**options)
    )


def rows(db: Database) -> dict[str, int]:
    with db.read() as conn:
        return {str(i): int(b) for i, b in conn.execute("SELECT id, batch FROM items")}


Batch = Callable[[apsw.Connection], Written[Any]]


def inserting(
    n: int, count: int = 3, *, body: str = "b", then: Callable[[], None] | None = None
) -> Batch:
    """A batch writing ``count`` rows of batch ``n``."""

    def batch(conn: apsw.Connection) -> Written[Any]:
        conn.executemany(
            "INSERT INTO items (id, batch, body) VALUES (?, ?, ?)",
            [(f"b{n}-{i}", n, body) for i in range(count)],
        )
        return Written(n, then)

    return batch


def grouped(db: Database, batches: Sequence[Batch]) -> list[Any]:
    """Each batch's value or exception, the batches queued in this order (one group)."""
    assert db.group is not None
    group = db.group
    return run_grouped(db, [functools.partial(group.submit, b) for b in batches])


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = open_db(tmp_path / "g.db")
    yield d
    d.close()


def test_a_lone_writer_commits_alone_without_waiting(db: Database) -> None:
    assert db.group is not None
    before = db.group.groups
    assert db.write_batch(inserting(1)) == 1
    assert db.group.groups == before + 1 and rows(db) == {f"b1-{i}": 1 for i in range(3)}


def test_queued_batches_share_one_commit_and_run_after_commit_in_order(db: Database) -> None:
    assert db.group is not None
    after: list[int] = []
    groups = db.group.groups
    out = grouped(db, [inserting(n, then=functools.partial(after.append, n)) for n in range(8)])
    assert out == list(range(8))
    assert db.group.groups == groups + 1  # one COMMIT for the eight
    assert after == list(range(8))
    assert sorted(set(rows(db).values())) == list(range(8))


def test_a_failing_batch_is_rolled_back_alone_and_gets_its_error(db: Database) -> None:
    after: list[int] = []

    def failing(conn: apsw.Connection) -> Written[Any]:
        inserting(3)(conn)  # written, then the batch fails: none of it may stay
        raise ValueError("batch three refuses")

    def duplicate(conn: apsw.Connection) -> Written[Any]:
        conn.execute("INSERT INTO items (id, batch, body) VALUES ('fresh', 5, 'x')")
        return inserting(0)(conn)  # ids batch 0 already wrote: a constraint error

    batches = [inserting(n, then=functools.partial(after.append, n)) for n in range(6)]
    batches[3] = failing
    batches[5] = duplicate
    out = grouped(db, batches)
    assert isinstance(out[3], ValueError) and str(out[3]) == "batch three refuses"
    assert isinstance(out[5], apsw.ConstraintError)
    assert [out[i] for i in (0, 1, 2, 4)] == [0, 1, 2, 4]
    assert after == [0, 1, 2, 4]  # only committed batches' steps, in order
    stored = rows(db)
    assert sorted(set(stored.values())) == [0, 1, 2, 4] and "fresh" not in stored


def test_a_later_batch_sees_the_earlier_ones_writes(db: Database) -> None:
    seen: list[int] = []

    def counting(conn: apsw.Connection) -> Written[Any]:
        seen.append(int(conn.execute("SELECT count(*) FROM items").fetchall()[0][0]))  # type: ignore[arg-type]
        return inserting(len(seen))(conn)

    grouped(db, [counting] * 4)
    assert seen == [0, 3, 6, 9]  # each as if the ones before had committed first


def test_a_failed_commit_fails_the_whole_group(db: Database, tmp_path: Path) -> None:
    assert db.group is not None
    after: list[int] = []
    db.write_batch(inserting(100))
    wal = Path(f"{tmp_path / 'g.db'}-wal")
    holder = threading.Event()

    def replace_wal(conn: apsw.Connection) -> Written[Any]:
        # The -wal is replaced under the open database: the check before COMMIT fails.
        inserting(2)(conn)
        wal.rename(wal.with_name("moved-wal"))
        wal.write_bytes(b"")
        holder.set()
        return Written(2, functools.partial(after.append, 2))

    batches = [inserting(n, then=functools.partial(after.append, n)) for n in range(4)]
    batches[2] = replace_wal
    out = grouped(db, batches)
    assert holder.is_set()
    assert all(isinstance(o, StorageUnavailable) for o in out), out
    assert after == []  # nothing acknowledged, no step ran
    assert {str(o) for o in out} == {"database -wal file was removed or replaced while open"}
    db.close()  # checkpoints through the handle it has open, then removes "g.db-wal"
    wal.unlink(missing_ok=True)
    wal.with_name("moved-wal").unlink()
    reopened = open_db(tmp_path / "g.db")
    try:
        assert set(rows(reopened).values()) == {100}
    finally:
        reopened.close()


def test_a_transaction_sqlite_rolled_back_fails_the_whole_group(db: Database) -> None:
    def rolls_back(conn: apsw.Connection) -> Written[Any]:
        inserting(1)(conn)
        conn.execute("ROLLBACK")  # what SQLite does itself on some I/O and full errors
        raise StorageFull("database or disk is full")

    out = grouped(db, [inserting(0), rolls_back, inserting(2)])
    assert all(isinstance(o, StorageFull) for o in out), out
    assert rows(db) == {}
    assert db.write_batch(inserting(3)) == 3  # the next write goes on


def test_a_full_database_refuses_the_batch_that_fills_it(tmp_path: Path) -> None:
    db = open_db(tmp_path / "g.db", max_page_count=40)
    try:
        out = grouped(db, [inserting(0), inserting(1, 200, body="x" * 4000), inserting(2)])
        assert isinstance(out[1], StorageFull)
        stored = rows(db)
        assert 1 not in stored.values()
        for n in (0, 2):  # acknowledged means stored; refused means absent
            assert (out[n] == n) == (n in stored.values())
    finally:
        db.close()


def test_below_the_reserve_the_growing_batch_alone_is_refused(tmp_path: Path) -> None:
    db = open_db(tmp_path / "g.db")
    for n in range(20):
        db.write_batch(inserting(n, 2, body="k" * 2000))
    db.close()
    db = open_db(tmp_path / "g.db", disk_reserve_bytes=free_bytes(str(tmp_path)) + (1 << 40))
    try:

        def delete(conn: apsw.Connection) -> Written[Any]:
            conn.execute("DELETE FROM items WHERE batch < 10")
            return Written("deleted")

        out = grouped(db, [delete, inserting(99, 40, body="x" * 2000)])
        assert out[0] == "deleted" and isinstance(out[1], StorageFull)
        assert sorted(set(rows(db).values())) == list(range(10, 20))
    finally:
        db.close()


def test_a_group_carries_at_most_max_batches(tmp_path: Path) -> None:
    db = open_db(tmp_path / "g.db", group_max_batches=4)
    try:
        assert db.group is not None
        groups = db.group.groups
        assert grouped(db, [inserting(n) for n in range(10)]) == list(range(10))
        assert db.group.groups == groups + 3  # 4, 4, 2
    finally:
        db.close()


def test_with_group_commit_off_each_batch_commits_alone(tmp_path: Path) -> None:
    db = open_db(tmp_path / "g.db", group_commit=False)
    try:
        assert db.group is None
        after: list[int] = []
        assert db.write_batch(inserting(1, then=lambda: after.append(1))) == 1
        with pytest.raises(ValueError, match="refused"):
            db.write_batch(lambda conn: (inserting(2)(conn), _raise())[0])
        assert after == [1] and set(rows(db).values()) == {1}
    finally:
        db.close()


def _raise() -> Written[Any]:
    raise ValueError("refused")


def test_a_closed_database_refuses_queued_batches(db: Database) -> None:
    db.close()
    with pytest.raises(StorageUnavailable, match="closed"):
        db.write_batch(inserting(1))


def test_many_threads_commit_every_batch_once(db: Database) -> None:
    assert db.group is not None
    groups = db.group.groups
    errors: list[BaseException] = []

    def writer(t: int) -> None:
        try:
            for i in range(40):
                db.write_batch(inserting(t * 1000 + i, 2))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert len(rows(db)) == 8 * 40 * 2
    assert db.group.groups - groups <= 8 * 40


@pytest.mark.slow
def test_sigkill_during_group_commits_keeps_every_acknowledged_batch(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    open_db(path).close()
    for attempt in range(3):
        acked = kill_mid_stream(
            [str(WRITER), str(path), str(attempt)],
            min_acks=40,
            rng=random.Random(attempt),
            max_delay_s=0.2,
        )
        db = open_db(path)
        try:
            with db.read() as conn:
                counts = {
                    int(b): int(n)
                    for b, n in conn.execute("SELECT batch, count(*) FROM items GROUP BY batch")
                }
        finally:
            db.close()
        assert set(acked) <= set(counts)  # every acknowledged batch is there
        assert set(counts.values()) == {5}  # and no batch is partial
