"""Statistics of one file: tables from the file itself, ledger and tombstones, sizes."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path

from ratatoskr.sqlite import ConnectionOptions, Database, Migration, database_stats

from .conftest import LEDGER, Holder, make_db, open_db


def test_counts_every_table_the_file_has(tmp_path: Path) -> None:
    db = open_db(tmp_path / "t.db")
    now = 1_000_000.0
    with db.write() as conn:
        conn.executemany(
            "INSERT INTO items (id, body) VALUES (?, ?)", [(f"i{i}", "b" * 300) for i in range(40)]
        )
        conn.executemany(
            "INSERT INTO test_tombstones (id, seq) VALUES (?, 1)", [(f"d{i}",) for i in range(3)]
        )
        for i, expires in enumerate([now - 10, now - 1, now + 60, now + 600, now + 6000]):
            LEDGER.record(conn, f"k{i}", digest="d", result={"ok": True}, expires_at=expires)
    with db.write() as conn:
        conn.execute("DELETE FROM items WHERE id >= 'i2'")  # frees pages
    db.close()
    stats = database_stats(str(tmp_path / "t.db"), plane="test", now=now)
    assert stats.exists and stats.schema_version == 2 and stats.planes == ("test",)
    rows = {t.name: t.rows for t in stats.tables}
    assert rows == {
        "items": 12,  # i0, i1 and i10..i19 sort before i2
        "ratatoskr_meta": 1,
        "ratatoskr_schema": 2,
        "test_idempotency": 5,
        "test_tombstones": 3,
    }
    assert (stats.ledger_entries, stats.ledger_expired, stats.tombstones) == (5, 2, 3)
    assert stats.freelist_pages > 0
    assert stats.free_bytes == stats.freelist_pages * stats.page_size
    assert stats.file_bytes == stats.page_count * stats.page_size
    assert stats.wal_bytes == 0  # closed cleanly: no WAL


def test_a_missing_file_is_reported_not_created(tmp_path: Path) -> None:
    stats = database_stats(str(tmp_path / "none.db"), plane="test")
    assert not stats.exists and stats.tables == []
    assert list(tmp_path.iterdir()) == []


def test_reading_stats_changes_nothing(tmp_path: Path) -> None:
    db = make_db(tmp_path / "t.db")
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    database_stats(str(db), plane="test")
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.db"]


def test_stats_beside_a_writer(tmp_path: Path, hold: Callable[[Path, str], Holder]) -> None:
    db = make_db(tmp_path / "t.db", n=10)
    writer = hold(db, "write")
    while len(writer.acked) < 20:
        time.sleep(0.01)
    seen = len(writer.acked)
    stats = database_stats(str(db), plane="test")
    rows = {t.name: t.rows for t in stats.tables}
    assert rows["items"] >= 10 + seen
    assert stats.wal_bytes > 0  # the writer's WAL, measured while it is open
    later = len(writer.acked)
    deadline = time.monotonic() + 30  # a loaded host may not schedule the writer for a while
    while len(writer.acked) <= later and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(writer.acked) > later  # never blocked


def test_a_vec_index_is_counted_as_a_virtual_table(tmp_path: Path) -> None:
    vec = Migration(1, "vec", "CREATE VIRTUAL TABLE v USING vec0(id TEXT PRIMARY KEY, e float[2])")
    db = Database(
        str(tmp_path / "v.db"),
        plane="vec",
        migrations=[vec],
        options=ConnectionOptions(load_vec=True),
    )
    with db.write() as conn:
        conn.executemany(
            "INSERT INTO v (id, e) VALUES (?, ?)", [(f"x{i}", "[1.0, 0.5]") for i in range(7)]
        )
    db.close()
    stats = database_stats(str(tmp_path / "v.db"), plane="vec")
    kinds = {t.name: (t.kind, t.rows) for t in stats.tables}
    assert kinds["v"] == ("virtual", 7)
    assert kinds["v_rowids"] == ("shadow", 7)
