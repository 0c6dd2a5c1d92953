"""The checks before every COMMIT (ratatoskr.sqlite.guard): the database's -wal and -shm
are the files opened, and below the disk reserve a write that grows the file is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ratatoskr.sqlite import (
    ConnectionOptions,
    Database,
    Migration,
    StorageFull,
    StorageUnavailable,
)
from ratatoskr.sqlite.guard import below_reserve, free_bytes

MIGRATIONS = [Migration(1, "items", "CREATE TABLE items (id TEXT PRIMARY KEY, body TEXT)")]


def open_db(path: Path, reserve: int = 0) -> Database:
    return Database(
        str(path),
        plane="test",
        migrations=MIGRATIONS,
        options=ConnectionOptions(disk_reserve_bytes=reserve),
    )


def insert(db: Database, key: str, size: int = 100) -> None:
    with db.write() as conn:
        conn.execute("INSERT INTO items (id, body) VALUES (?, ?)", (key, "b" * size))


def stored(path: Path) -> list[str]:
    db = open_db(path)
    try:
        with db.read() as conn:
            return [str(r[0]) for r in conn.execute("SELECT id FROM items ORDER BY id")]
    finally:
        db.close()


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
@pytest.mark.parametrize("how", ["unlinked", "replaced"])
def test_a_removed_or_replaced_sidecar_fails_the_write_closed(
    tmp_path: Path, suffix: str, how: str
) -> None:
    path = tmp_path / "x.db"
    db = open_db(path)
    insert(db, "before")
    sidecar = Path(f"{path}{suffix}")
    sidecar.unlink()
    if how == "replaced":
        sidecar.write_bytes(b"")
    with pytest.raises(StorageUnavailable, match=f"database {suffix} file was removed or replaced"):
        insert(db, "after")
    # Every later write too: nothing is acknowledged into a file no one else can see.
    with pytest.raises(StorageUnavailable):
        insert(db, "later")
    db.close()
    assert "after" not in stored(path) and "later" not in stored(path)


def test_another_process_opening_and_closing_the_file_is_not_an_alarm(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    db = open_db(path)
    insert(db, "a")
    # A second process writes, checkpoints with TRUNCATE and closes: the last-close
    # cleanup is not its to do while this database is open, so the files stay.
    script = (
        "import apsw, sys\n"
        "c = apsw.Connection(sys.argv[1])\n"
        "c.execute(\"INSERT INTO items VALUES ('b', 'x')\")\n"
        "c.execute('PRAGMA wal_checkpoint(TRUNCATE)').fetchall()\n"
        "c.close()\n"
    )
    subprocess.run([sys.executable, "-c", script, str(path)], check=True)
    insert(db, "c")
    db.checkpoint()
    db.compact()  # ends with a TRUNCATE checkpoint of its own
    insert(db, "d")
    db.close()
    assert stored(path) == ["a", "b", "c", "d"]


def test_a_reopened_database_records_the_new_files(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    db = open_db(path)
    insert(db, "a")
    db.close()  # the last connection: SQLite removes -wal and -shm
    assert not Path(f"{path}-wal").exists()
    db = open_db(path)
    insert(db, "b")
    db.close()
    assert stored(path) == ["a", "b"]


def test_below_the_reserve_growing_writes_are_refused_and_deletes_go_on(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    db = open_db(path)
    for i in range(40):
        insert(db, f"k{i:02}", 2000)
    db.close()
    # A reserve larger than the free space: this filesystem is "full".
    huge = free_bytes(str(tmp_path)) + (1 << 40)
    assert below_reserve(str(tmp_path), huge)
    db = open_db(path, reserve=huge)
    with pytest.raises(StorageFull, match="below the reserve"), db.write() as conn:
        conn.executemany(
            "INSERT INTO items VALUES (?, ?)", [(f"n{i}", "x" * 2000) for i in range(20)]
        )
    assert len(stored(path)) == 40
    # Deletes go on (they free pages), and so do writes into the freed pages.
    with db.write() as conn:
        conn.execute("DELETE FROM items WHERE id < 'k20'")
    insert(db, "reused", 2000)
    with db.write() as conn:
        conn.execute("UPDATE items SET body = ? WHERE id = 'k30'", ("y" * 1000,))
    db.close()
    assert len(stored(path)) == 21
    # No reserve: the same growing write is written.
    db = open_db(path)
    with db.write() as conn:
        conn.executemany(
            "INSERT INTO items VALUES (?, ?)", [(f"n{i}", "x" * 2000) for i in range(20)]
        )
    db.close()
    assert len(stored(path)) == 41


def test_the_reserve_is_measured_at_each_write(tmp_path: Path) -> None:
    """Nothing is remembered: the first write after space returns succeeds."""
    path = tmp_path / "x.db"
    open_db(path).close()
    db = open_db(path, reserve=1)
    assert not below_reserve(str(tmp_path), 1)
    assert not below_reserve(str(tmp_path), 0)
    insert(db, "a", 20_000)
    db._guard.reserve_bytes = free_bytes(str(tmp_path)) + (1 << 40)  # type: ignore[union-attr]
    with pytest.raises(StorageFull):
        insert(db, "b", 20_000)
    db._guard.reserve_bytes = 1  # type: ignore[union-attr]
    insert(db, "b", 20_000)
    db.close()
    assert stored(path) == ["a", "b"]


def test_an_unreadable_filesystem_counts_as_below(tmp_path: Path) -> None:
    assert below_reserve(str(tmp_path / "missing"), 1)
    assert not below_reserve(str(tmp_path / "missing"), 0)
    assert os.path.isdir(tmp_path)


def test_the_schema_is_written_below_the_reserve(tmp_path: Path) -> None:
    """A provider starts on a nearly full disk (and answers reads); data writes wait."""
    path = tmp_path / "x.db"
    db = open_db(path, reserve=free_bytes(str(tmp_path)) + (1 << 40))
    with pytest.raises(StorageFull):
        insert(db, "a", 20_000)
    db.close()
    assert stored(path) == []


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
def test_through_a_symlink_the_sidecars_beside_the_file_are_checked(
    symlinked: tuple[Path, Path], suffix: str
) -> None:
    # SQLite keeps -wal/-shm beside the file a symlinked path names, not beside the link:
    # the guard looked beside the link, found nothing there and never checked them.
    real, link = symlinked
    open_db(real).close()
    db = open_db(link)
    insert(db, "before")
    assert Path(f"{real}{suffix}").exists() and not os.path.lexists(f"{link}{suffix}")
    Path(f"{real}{suffix}").unlink()
    with pytest.raises(StorageUnavailable, match=f"database {suffix} file was removed or replaced"):
        insert(db, "after")
    db.close()
    assert "after" not in stored(real)


def test_a_retargeted_symlink_is_a_replaced_file(tmp_path: Path) -> None:
    first, second, link = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "x.db"
    open_db(first).close()
    open_db(second).close()
    link.symlink_to(first)
    db = open_db(link)
    insert(db, "before")
    link.unlink()
    link.symlink_to(second)  # a restart would open b.db: a write to a.db would be lost
    with pytest.raises(StorageUnavailable, match="database file was removed or replaced"):
        insert(db, "after")
    db.close()
    assert "after" not in stored(first)
