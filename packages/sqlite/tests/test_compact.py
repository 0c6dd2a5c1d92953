"""Compaction: free pages go back to the filesystem, incrementally for the files this
library creates, by one VACUUM (which converts them) for older files; data, readers
and a serving process are unaffected."""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path

import apsw
import pytest

from ratatoskr.sqlite import (
    ConnectionOptions,
    Database,
    ForeignDatabase,
    Migration,
    StorageUnavailable,
)
from ratatoskr.sqlite.database import COMPACT_STEP_PAGES, compact_database

MIGRATIONS = [Migration(1, "blobs", "CREATE TABLE blobs (id INTEGER PRIMARY KEY, b BLOB)")]
BLOB = 16 * 1024


def open_db(path: Path, **kw: object) -> Database:
    return Database(str(path), plane="test", migrations=MIGRATIONS, **kw)  # type: ignore[arg-type]


def fill(db: Database, n: int) -> None:
    with db.write() as conn:
        conn.executemany(
            "INSERT INTO blobs (id, b) VALUES (?, randomblob(?))", [(i, BLOB) for i in range(n)]
        )


def drop_most(db: Database, n: int) -> None:
    with db.write() as conn:
        conn.execute("DELETE FROM blobs WHERE id % 10 < 6 AND id < ?", (n,))


def pragma(db: Database, name: str) -> int:
    """``PRAGMA name`` of the file as it is now (a fresh connection: a connection
    answers ``auto_vacuum`` from what it last read)."""
    conn = apsw.Connection(db.path)
    try:
        return int(conn.execute(f"PRAGMA {name}").fetchall()[0][0])  # type: ignore[arg-type]
    finally:
        conn.close()


def content(db: Database) -> str:
    with db.read() as conn:
        h = hashlib.sha256()
        for i, b in conn.execute("SELECT id, b FROM blobs ORDER BY id"):
            h.update(str(i).encode() + bytes(b))
        return h.hexdigest()


def none_file(path: Path, n: int) -> None:
    """A file as releases before incremental auto-vacuum created them."""
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE blobs (id INTEGER PRIMARY KEY, b BLOB)")
    conn.execute(
        "CREATE TABLE ratatoskr_schema (plane TEXT NOT NULL, version INTEGER NOT NULL,"
        " name TEXT NOT NULL, applied_at TEXT NOT NULL, PRIMARY KEY (plane, version))"
        " WITHOUT ROWID"
    )
    conn.execute("INSERT INTO ratatoskr_schema VALUES ('test', 1, 'blobs', 'x')")
    conn.execute("CREATE TABLE ratatoskr_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.executemany("INSERT INTO blobs VALUES (?, randomblob(?))", [(i, BLOB) for i in range(n)])
    conn.close()


def test_new_files_are_incremental_and_existing_ones_untouched(tmp_path: Path) -> None:
    db = open_db(tmp_path / "new.db")
    assert pragma(db, "auto_vacuum") == 2  # INCREMENTAL
    db.close()
    old = tmp_path / "old.db"
    none_file(old, 10)
    before = old.read_bytes()
    db = open_db(old)
    assert pragma(db, "auto_vacuum") == 0
    db.close()
    assert old.read_bytes() == before


def test_incremental_compaction_gives_free_pages_back(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    db = open_db(path)
    fill(db, 2500)  # ~40 MB: several steps of COMPACT_STEP_PAGES
    drop_most(db, 2500)
    kept = content(db)
    free = pragma(db, "freelist_count")
    assert free > COMPACT_STEP_PAGES
    size_before = path.stat().st_size
    commits: list[int] = []

    def count_commit() -> bool:
        commits.append(1)
        return False  # let it commit

    db._writer.set_commit_hook(count_commit)
    report = db.compact()
    db._writer.set_commit_hook(None)
    # One short transaction per step: other writers get the lock in between.
    assert len(commits) >= math.ceil(free / COMPACT_STEP_PAGES)
    assert report.method == "incremental_vacuum"
    assert report.free_pages_before == free and report.free_pages_after == 0
    assert report.wal_truncated and not os.path.getsize(str(path) + "-wal")
    assert path.stat().st_size <= size_before - free * 4096 + 4096
    assert report.bytes_reclaimed >= free * 4096 * 0.9
    assert content(db) == kept
    fill_more = [(10_000 + i, b"x") for i in range(3)]
    with db.write() as conn:  # still a working database
        conn.executemany("INSERT INTO blobs VALUES (?, ?)", fill_more)
    db.close()


def test_an_old_file_is_vacuumed_once_and_incremental_after(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    none_file(path, 600)
    db = open_db(path)
    drop_most(db, 600)
    kept = content(db)
    report = db.compact()
    assert report.method == "vacuum"
    assert report.free_pages_after == 0 and report.bytes_after < report.bytes_before / 2
    assert pragma(db, "auto_vacuum") == 2
    assert content(db) == kept
    with db.write() as conn:
        conn.execute("DELETE FROM blobs WHERE id % 2 = 0")
    again = db.compact()
    assert again.method == "incremental_vacuum" and again.free_pages_after == 0
    assert db.compact(full=True).method == "vacuum"
    db.close()


def test_readers_keep_their_snapshot_and_writers_their_file(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    db = open_db(path, options=ConnectionOptions(busy_timeout_ms=200))
    fill(db, 300)
    kept = content(db)
    other = open_db(path)  # another open of the file (another process, say)
    reader = other._reader()
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM blobs").fetchall() == [(300,)]
    drop_most(db, 300)
    report = db.compact()
    # The old snapshot is still readable whole; the WAL waits for it to end.
    assert reader.execute("SELECT count(*) FROM blobs").fetchall() == [(300,)]
    assert not report.wal_truncated
    reader.execute("COMMIT")
    assert content(other) != kept  # the reader moved on to the compacted file
    with other.write() as conn:
        conn.execute("INSERT INTO blobs VALUES (5000, x'00')")
    assert db.compact().wal_truncated
    assert content(db) == content(other)
    other.close()
    db.close()


def test_prepare_runs_first_in_a_write_transaction(tmp_path: Path) -> None:
    db = open_db(tmp_path / "p.db")
    fill(db, 50)

    def rebuild(conn: apsw.Connection) -> list[str]:
        assert not conn.get_autocommit()
        conn.execute("DELETE FROM blobs")
        return ["blobs"]

    report = db.compact(prepare=rebuild)
    assert report.rebuilt == ("blobs",) and report.free_pages_after == 0
    fill(db, 50)

    def fails(conn: apsw.Connection) -> list[str]:
        conn.execute("DELETE FROM blobs")
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        db.compact(prepare=fails)
    assert pragma(db, "page_count") > 50 * 4  # rolled back: nothing deleted
    db.close()


def test_compact_database_by_path_beside_a_serving_database(tmp_path: Path) -> None:
    path = tmp_path / "served.db"
    served = open_db(path)
    fill(served, 400)
    drop_most(served, 400)
    kept = content(served)
    report = compact_database(str(path), plane="test")
    assert report.method == "incremental_vacuum" and report.free_pages_after == 0
    assert content(served) == kept
    fill_more = [(9000, b"y")]
    with served.write() as conn:
        conn.executemany("INSERT INTO blobs VALUES (?, ?)", fill_more)
    served.close()


def test_compact_database_refuses_missing_and_foreign_files(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    with pytest.raises(StorageUnavailable):
        compact_database(str(missing), plane="test")
    assert not missing.exists()
    path = tmp_path / "x.db"
    open_db(path).close()
    before = path.read_bytes()
    with pytest.raises(ForeignDatabase):
        compact_database(str(path), plane="affect")
    assert path.read_bytes() == before
    blank = tmp_path / "blank.db"
    apsw.Connection(str(blank)).execute("CREATE TABLE t (x)")
    with pytest.raises(ForeignDatabase):
        compact_database(str(blank), plane="test")


def test_memory_and_closed_databases() -> None:
    db = Database(":memory:", plane="test", migrations=MIGRATIONS)
    fill(db, 3)
    assert db.compact().method == "none"
    db.close()
    with pytest.raises(StorageUnavailable):
        db.compact()
