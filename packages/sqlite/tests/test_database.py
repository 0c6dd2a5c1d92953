"""The shared Database: migrations, fixed settings, transactions, threads, failures."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from pathlib import Path

import apsw
import pytest

from ratatoskr.sqlite import (
    INTEGRITY_SKIPPED,
    ConnectionOptions,
    Database,
    MetaSetting,
    Migration,
    SchemaMismatch,
    SchemaTooNew,
    StorageCorrupt,
    StorageFull,
    StorageUnavailable,
    inspect_database,
    same_file,
)

MIGRATIONS = [
    Migration(1, "items", "CREATE TABLE items (id TEXT PRIMARY KEY, body TEXT NOT NULL)"),
    Migration(2, "items_n", "ALTER TABLE items ADD COLUMN n INTEGER NOT NULL DEFAULT 0"),
]


def open_db(path: str, dim: str = "8", **kw: object) -> Database:
    return Database(
        path,
        plane="test",
        migrations=MIGRATIONS,
        meta={"dim": MetaSetting(dim, "TEST_DIM")},
        **kw,  # type: ignore[arg-type]
    )


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rows(db: Database) -> list[tuple[object, ...]]:
    with db.read() as conn:
        return [tuple(r) for r in conn.execute("SELECT id, body, n FROM items ORDER BY id")]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "test.db"


def test_fresh_file_is_migrated_and_wal(db_path: Path) -> None:
    db = open_db(str(db_path))
    assert db.schema_version() == 2
    with db.read() as conn:
        assert conn.execute("PRAGMA journal_mode").fetchall()[0][0] == "wal"
        assert int(conn.execute("PRAGMA busy_timeout").fetchall()[0][0]) >= 5000  # type: ignore[arg-type]
    db.close()


def test_reopen_is_idempotent(db_path: Path) -> None:
    db = open_db(str(db_path))
    with db.write() as conn:
        conn.execute("INSERT INTO items (id, body) VALUES ('a', 'x')")
    db.close()
    db = open_db(str(db_path))
    assert db.schema_version() == 2
    assert rows(db) == [("a", "x", 0)]
    db.close()


def test_other_fixed_setting_is_refused_and_file_untouched(db_path: Path) -> None:
    open_db(str(db_path)).close()
    before = file_digest(db_path)
    with pytest.raises(SchemaMismatch) as info:
        open_db(str(db_path), dim="16")
    assert "TEST_DIM=8" in str(info.value) and "TEST_DIM=16" in str(info.value)
    assert file_digest(db_path) == before


def test_newer_schema_is_refused(db_path: Path) -> None:
    open_db(str(db_path)).close()
    with pytest.raises(SchemaTooNew):
        Database(str(db_path), plane="test", migrations=MIGRATIONS[:1])


def test_migration_gaps_are_a_programming_error(db_path: Path) -> None:
    with pytest.raises(ValueError, match="numbered"):
        Database(str(db_path), plane="test", migrations=[MIGRATIONS[1]])


def test_write_rolls_back_on_error(db_path: Path) -> None:
    db = open_db(str(db_path))
    with pytest.raises(RuntimeError), db.write() as conn:
        conn.execute("INSERT INTO items (id, body) VALUES ('a', 'x')")
        raise RuntimeError("boom")
    assert rows(db) == []
    db.close()


def test_memory_database_works_across_threads() -> None:
    db = open_db(":memory:")
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            for j in range(50):
                with db.write() as conn:
                    conn.execute("INSERT INTO items (id, body) VALUES (?, 'x')", (f"{i}-{j}",))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(rows(db)) == 200
    db.close()


def test_readers_see_committed_state_only(db_path: Path) -> None:
    db = open_db(str(db_path))
    seen: list[int] = []
    started = threading.Event()
    release = threading.Event()

    def slow_writer() -> None:
        with db.write() as conn:
            conn.execute("INSERT INTO items (id, body) VALUES ('a', 'x')")
            started.set()
            release.wait(5)

    t = threading.Thread(target=slow_writer)
    t.start()
    started.wait(5)
    seen.append(len(rows(db)))  # a reader does not wait for the open write
    release.set()
    t.join()
    seen.append(len(rows(db)))
    assert seen == [0, 1]
    db.close()


def test_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StorageUnavailable):
        open_db(str(tmp_path / "nope" / "x.db"))
    assert not (tmp_path / "nope").exists()


def test_corrupt_file_is_refused_and_kept(db_path: Path) -> None:
    db_path.write_bytes(b"this is not a database" * 100)
    before = file_digest(db_path)
    with pytest.raises(StorageCorrupt):
        open_db(str(db_path))
    assert file_digest(db_path) == before


def test_disk_full_rolls_back_whole_transaction(db_path: Path) -> None:
    open_db(str(db_path)).close()
    db = open_db(str(db_path), options=ConnectionOptions(max_page_count=8))
    with db.write() as conn:
        conn.execute("INSERT INTO items (id, body) VALUES ('keep', 'x')")
    with pytest.raises(StorageFull), db.write() as conn:
        for i in range(1000):
            conn.execute("INSERT INTO items (id, body) VALUES (?, ?)", (str(i), "y" * 1000))
    assert rows(db) == [("keep", "x", 0)]
    db.close()


def test_closed_database_raises(db_path: Path) -> None:
    db = open_db(str(db_path))
    db.close()
    db.close()
    with pytest.raises(StorageUnavailable):
        rows(db)


def test_sqlite_vec_is_loaded_on_every_connection(db_path: Path) -> None:
    db = Database(
        str(db_path),
        plane="vec",
        migrations=[
            Migration(1, "vec", "CREATE VIRTUAL TABLE v USING vec0(embedding float[2])"),
        ],
        options=ConnectionOptions(load_vec=True),
    )
    with db.write() as conn:
        conn.execute("INSERT INTO v(rowid, embedding) VALUES (1, '[1, 0]')")
    result: list[object] = []

    def read_in_thread() -> None:
        with db.read() as conn:
            result.append(conn.execute("SELECT count(*) FROM v").fetchall()[0][0])

    t = threading.Thread(target=read_in_thread)
    t.start()
    t.join()
    assert result == [1]
    db.close()


def test_inspect_reads_without_creating(tmp_path: Path, db_path: Path) -> None:
    missing = tmp_path / "missing.db"
    assert inspect_database(str(missing), plane="test").exists is False
    assert not missing.exists()
    open_db(str(db_path)).close()
    before = {p.name: file_digest(p) for p in db_path.parent.iterdir()}
    report = inspect_database(str(db_path), plane="test", keys=["dim"])
    assert {p.name: file_digest(p) for p in db_path.parent.iterdir()} == before
    assert (report.exists, report.schema_version, report.meta, report.integrity) == (
        True,
        2,
        {"dim": "8"},
        "ok",
    )


def test_inspect_leaves_a_dead_writers_wal_alone(tmp_path: Path) -> None:
    """A writer killed before its close leaves its commits in -wal: a read-write look
    would checkpoint them into the file and delete -wal on close. The look is read-only
    then, and the database and its -wal keep every byte."""
    path = tmp_path / "dead.db"
    writer = (
        "import os, sys, apsw\n"
        "c = apsw.Connection(sys.argv[1])\n"
        "c.execute('PRAGMA journal_mode=WAL').fetchall()\n"
        "c.execute('CREATE TABLE t(x)')\n"
        "c.execute('INSERT INTO t VALUES (1)')\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", writer, str(path)], check=True)
    wal = tmp_path / "dead.db-wal"
    before = (file_digest(path), file_digest(wal))
    report = inspect_database(str(path), plane="test")
    assert report.exists and report.integrity == "ok"
    assert (file_digest(path), file_digest(wal)) == before


def test_inspect_probes_only_an_intact_file_of_the_plane(db_path: Path) -> None:
    open_db(str(db_path)).close()

    def probe(conn: apsw.Connection) -> object:
        return conn.execute("SELECT count(*) FROM sqlite_master").fetchall()[0][0]

    report = inspect_database(str(db_path), plane="test", probe=probe)
    assert isinstance(report.probed, int) and report.probed > 0
    assert inspect_database(str(db_path), plane="test").probed is None
    assert inspect_database(str(db_path), plane="other", probe=probe).probed is None


def test_same_file(tmp_path: Path) -> None:
    a = tmp_path / "a.db"
    assert same_file(str(a), str(tmp_path / "." / "a.db"))
    assert not same_file(str(a), str(tmp_path / "b.db"))
    assert not same_file(":memory:", ":memory:")
    a.write_bytes(b"")
    os.link(a, tmp_path / "hard.db")
    assert same_file(str(a), str(tmp_path / "hard.db"))


@pytest.mark.slow
def test_the_wal_is_bounded_once_readers_let_go(tmp_path: Path) -> None:
    """A WAL that grew under a long reader is truncated to journal_size_limit after the
    next resetting checkpoint (SQLite never shrinks it otherwise)."""
    limit = 256 * 1024
    db = Database(
        str(tmp_path / "w.db"),
        plane="w",
        migrations=[Migration(1, "t", "CREATE TABLE t (x BLOB)")],
        options=ConnectionOptions(journal_size_limit=limit),
    )
    wal = tmp_path / "w.db-wal"
    reader = db._reader()  # a reader holding an old snapshot keeps the WAL growing
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM t").fetchall()
    for _ in range(400):
        with db.write() as conn:
            conn.execute("INSERT INTO t VALUES (zeroblob(8192))")
    grown = wal.stat().st_size
    assert grown > 4 * limit
    reader.execute("COMMIT")
    # Ordinary writes: the automatic checkpoint completes now, and the write after it
    # restarts the WAL, truncated to the limit.
    for _ in range(3):
        with db.write() as conn:
            conn.execute("DELETE FROM t WHERE rowid IN (SELECT rowid FROM t LIMIT 1)")
    assert wal.stat().st_size <= limit
    db.close()


def _damaged_interior(db_path: Path) -> None:
    """A file whose schema reads but one of whose table pages is garbage (the last
    page: a leaf of ``items``), so only a check that reads every page sees it."""
    db = open_db(str(db_path))
    with db.write() as conn:
        for i in range(200):
            conn.execute("INSERT INTO items (id, body) VALUES (?, ?)", (f"{i:04d}", "x" * 900))
    db.close()
    data = bytearray(db_path.read_bytes())
    data[-4096 + 8 : -4096 + 2048] = b"\xa5" * (2048 - 8)
    db_path.write_bytes(bytes(data))


def test_inspect_skips_the_integrity_check_past_its_limit(db_path: Path) -> None:
    """A start's bounded look: a file larger than ``check_limit`` (with its -wal) is not
    read page by page, and says so; at or under the limit, or with none, it is."""
    _damaged_interior(db_path)
    size = db_path.stat().st_size
    assert inspect_database(str(db_path), plane="test").integrity == "damaged"
    assert inspect_database(str(db_path), plane="test", check_limit=size).integrity == "damaged"
    report = inspect_database(str(db_path), plane="test", keys=["dim"], check_limit=size - 1)
    assert (report.integrity, report.schema_version, report.meta) == (
        INTEGRITY_SKIPPED,
        2,
        {"dim": "8"},
    )


def _open_fds(path: Path) -> int:
    """File descriptors of this process open on ``path`` or its -wal/-shm."""
    names = {str(path), f"{path}-wal", f"{path}-shm"}
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") in names:
                count += 1
        except OSError:
            continue
    return count


def test_close_during_a_read_on_another_thread(db_path: Path) -> None:
    """close() while another thread is inside a read statement: apsw refuses to close a
    connection in use elsewhere; the close still closes the writer and the idle
    readers, and the busy reader is closed by its own thread when its read ends, so
    no file descriptor stays open and every later call is refused."""
    db = open_db(str(db_path))
    with db.write() as conn:
        conn.execute("INSERT INTO items (id, body) VALUES ('a', 'x')")
    rows(db)  # this thread's reader, idle from now on
    inside, release = threading.Event(), threading.Event()

    def waiting(*_values: object) -> int:
        inside.set()
        release.wait(10)
        return 1

    errors: list[BaseException] = []

    def reader() -> None:
        try:
            with db.read() as conn:
                conn.create_scalar_function("waiting", waiting)
                conn.execute("SELECT waiting(id) FROM items").fetchall()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=reader)
    t.start()
    assert inside.wait(10)
    db.close()  # the other thread's statement is still running
    release.set()
    t.join(10)
    assert errors == []  # its read finished: the close did not pull it from under it
    assert _open_fds(db_path) == 0
    with pytest.raises(StorageUnavailable):
        rows(db)


@pytest.mark.parametrize("where", ["file", "memory"])
def test_read_rows_is_one_statement_read(tmp_path: Path, where: str) -> None:
    """``read_rows`` answers like a read of one statement: inside a read of the thread,
    that read's snapshot; closed, StorageUnavailable."""
    db = open_db(str(tmp_path / "t.db") if where == "file" else ":memory:")
    with db.write() as conn:
        conn.execute("INSERT INTO items (id, body) VALUES ('a', 'x')")
    query = "SELECT id FROM items ORDER BY id"
    assert db.read_rows(query) == [("a",)]
    assert db.read_rows("SELECT body FROM items WHERE id = ?", ("a",)) == [("x",)]
    if where == "file":
        with db.read() as conn:
            conn.execute("SELECT count(*) FROM items").fetchall()  # the snapshot starts
            other = threading.Thread(target=lambda: _insert(db, "b"))
            other.start()
            other.join()
            assert db.read_rows(query) == [("a",)]  # the enclosing read's snapshot
        assert db.read_rows(query) == [("a",), ("b",)]
    db.close()
    with pytest.raises(StorageUnavailable):
        db.read_rows(query)


def _insert(db: Database, key: str) -> None:
    with db.write() as conn:
        conn.execute("INSERT INTO items (id, body) VALUES (?, 'y')", (key,))
