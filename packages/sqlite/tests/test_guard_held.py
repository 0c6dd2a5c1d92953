"""The files a server found at its start (ratatoskr.sqlite.guard: HeldFiles, expect_files):
held open by the parent so SQLite never removes them, and the only ones a Database
opened later in a worker may write to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ratatoskr.sqlite import ConnectionOptions, Database, Migration, StorageUnavailable, guard
from ratatoskr.sqlite.files import file_identity
from ratatoskr.sqlite.guard import FileSet, HeldFiles, expect_files, start_files

SCHEMA = "CREATE TABLE items (id TEXT PRIMARY KEY, body TEXT)"
MIGRATIONS = [Migration(1, "items", SCHEMA)]


@pytest.fixture(autouse=True)
def _no_expectations(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with a process that was told to expect nothing."""
    monkeypatch.setattr(guard, "_expected", {})


def open_db(path: Path) -> Database:
    return Database(str(path), plane="test", migrations=MIGRATIONS, options=ConnectionOptions())


def insert(db: Database, key: str) -> None:
    with db.write() as conn:
        conn.execute("INSERT INTO items (id, body) VALUES (?, ?)", (key, "b" * 300))


def ids(db: Database) -> list[str]:
    with db.read() as conn:
        return [str(r[0]) for r in conn.execute("SELECT id FROM items ORDER BY id")]


# A server's parent: creates and writes the file, checkpoints it (a WAL removed while it
# holds frames other processes still need makes a later open fail: an I/O error), holds
# it, closes its Database, prints the identities it holds and keeps holding them until
# stdin closes.
PARENT = """
import json, sys
from ratatoskr.sqlite import ConnectionOptions, Database, Migration
from ratatoskr.sqlite.guard import HeldFiles
path = sys.argv[1]
first = Database(path, plane="test", options=ConnectionOptions(),
                 migrations=[Migration(1, "items", sys.argv[2])])
with first.write() as conn:
    conn.execute("INSERT INTO items (id, body) VALUES ('start', 'x')")
first.truncate_wal(1000)  # what the operator's `compact` ends with
hold = HeldFiles([path, path])
first.close()
print(json.dumps({p: [f.main, f.sidecars] for p, f in hold.files.items()}), flush=True)
sys.stdin.read()
hold.close()
"""


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Path, dict[str, FileSet]]]:
    """A file held by another process (a server's parent, its first Database closed)
    and the identities that process holds."""
    path = tmp_path / "x.db"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(path), SCHEMA],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None and parent.stdin is not None
    try:
        line = parent.stdout.readline()
        files = {
            p: FileSet(_identity(main), tuple(_identity(s) for s in sides))
            for p, (main, sides) in json.loads(line).items()
        }
        yield path, files
    finally:
        parent.stdin.close()
        parent.wait(30)


def _identity(value: list[int] | None) -> tuple[int, int] | None:
    return None if value is None else (value[0], value[1])


def test_held_files_keep_the_sidecars_of_the_last_closed_database(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    first = open_db(path)
    insert(first, "start")
    hold = HeldFiles([str(path), str(path)])
    first.close()
    real = os.path.realpath(path)
    assert list(hold.files) == [real]  # one hold per file, however often named
    # The last Database closed, yet SQLite left -wal and -shm: they are the ones held.
    assert hold.files[real] == FileSet.of(str(path))
    assert all(side is not None for side in hold.files[real].sidecars)
    hold.close()
    hold.close()  # idempotent
    # The hold was the last connection: SQLite's own cleanup ran at its close.
    assert not os.path.exists(f"{path}-wal") and not os.path.exists(f"{path}-shm")


def test_held_files_refuse_a_missing_file_and_hold_nothing(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    open_db(path).close()
    with pytest.raises(StorageUnavailable):
        HeldFiles([str(path), str(tmp_path / "missing.db")])
    # Nothing stayed open: the first file's last connection was closed again.
    assert not os.path.exists(f"{path}-wal")


def test_the_expected_files_take_every_write_while_they_stay(
    held: tuple[Path, dict[str, FileSet]],
) -> None:
    path, files = held
    expect_files(files)
    db = open_db(path)
    try:
        insert(db, "a")
        db.checkpoint()
        assert db.truncate_wal(0)  # a TRUNCATE checkpoint rewrites the same -wal
        insert(db, "b")
        # Another process writes, checkpoints and closes: still the same files.
        script = (
            "import apsw, sys\n"
            "c = apsw.Connection(sys.argv[1])\n"
            "c.execute(\"INSERT INTO items VALUES ('c', 'x')\")\n"
            "c.execute('PRAGMA wal_checkpoint(TRUNCATE)').fetchall()\n"
            "c.close()\n"
        )
        subprocess.run([sys.executable, "-c", script, str(path)], check=True)
        insert(db, "d")
        assert ids(db) == ["a", "b", "c", "d", "start"]
    finally:
        db.close()


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
@pytest.mark.parametrize("how", ["unlinked", "replaced"])
def test_a_database_opened_after_a_sidecar_changed_refuses_every_write(
    held: tuple[Path, dict[str, FileSet]], tmp_path: Path, suffix: str, how: str
) -> None:
    """A worker started after the swap: what it finds at the path is not what the server
    found at its start (before the fix it recorded the new file and took every write)."""
    path, files = held
    expect_files(files)
    sidecar = Path(f"{path}{suffix}")
    sidecar.rename(tmp_path / "elsewhere")
    if how == "replaced":
        sidecar.write_bytes(b"")
    db = open_db(path)  # opens (a worker starts and answers /readyz) ...
    try:
        assert start_files(str(path)) == files[os.path.realpath(path)]
        for key in ("after", "later"):  # ... and refuses every write
            with pytest.raises(
                StorageUnavailable, match=f"database {suffix} file was removed or replaced"
            ):
                insert(db, key)
        # Nor does it checkpoint: the pages of a WAL not the server's never reach the file.
        with pytest.raises(StorageUnavailable):
            db.checkpoint()
        with pytest.raises(StorageUnavailable):
            db.truncate_wal(0)
        assert ids(db) == ["start"]
    finally:
        db.close()


def test_a_database_opened_after_the_file_was_replaced_refuses_every_write(
    held: tuple[Path, dict[str, FileSet]], tmp_path: Path
) -> None:
    path, files = held
    expect_files(files)
    os.rename(path, tmp_path / "elsewhere.db")
    for suffix in ("-wal", "-shm"):
        os.rename(f"{path}{suffix}", tmp_path / f"elsewhere.db{suffix}")
    db = open_db(path)  # a new, empty file at the path
    try:
        with pytest.raises(StorageUnavailable, match="database file was removed or replaced"):
            insert(db, "after")
        assert ids(db) == []
    finally:
        db.close()


def test_without_expectations_a_database_takes_the_files_it_finds(
    held: tuple[Path, dict[str, FileSet]], tmp_path: Path
) -> None:
    """One process (``--workers 1``, the CLI): nothing expected, the files at open count."""
    path, _ = held
    Path(f"{path}-wal").rename(tmp_path / "elsewhere")
    assert start_files(str(path)) == FileSet.of(str(path))
    db = open_db(path)
    try:
        insert(db, "after")
        assert "after" in ids(db)
    finally:
        db.close()


def test_a_hold_never_blocks_a_truncating_checkpoint(held: tuple[Path, dict[str, FileSet]]) -> None:
    """The erasure path cuts the WAL to zero bytes: a snapshot held by the parent would
    make it wait (busy) and leave erased rows in the WAL."""
    path, files = held
    expect_files(files)
    db = open_db(path)
    try:
        for i in range(50):
            insert(db, f"k{i}")
        wal = f"{path}-wal"
        assert os.path.getsize(wal) > 0
        with db.write() as conn:
            conn.execute("DELETE FROM items WHERE id LIKE 'k%'")
        assert db.truncate_wal(0)  # no wait at all: nothing holds a snapshot
        assert os.path.getsize(wal) == 0
        assert file_identity(wal) == files[os.path.realpath(path)].sidecars[0]
        insert(db, "after")  # and the same -wal takes the next write
    finally:
        db.close()


def test_a_symlinked_file_held_by_the_parent_takes_every_write(
    symlinked: tuple[Path, Path],
) -> None:
    # A plane setting naming a symlink, served with --workers N: the parent holds the
    # file by its real path, and a worker opening the link must find those files (it
    # looked for -wal/-shm beside the link, found none, and refused every write).
    real, link = symlinked
    open_db(real).close()
    first = open_db(link)
    insert(first, "start")
    hold = HeldFiles([str(link)])
    first.close()
    try:
        assert hold.files == {str(real): FileSet.of(str(real)), str(link): FileSet.of(str(real))}
        assert start_files(str(link)) == FileSet.of(str(real))
        expect_files(hold.files)
        db = open_db(link)
        try:
            insert(db, "a")
            db.checkpoint()
            assert db.truncate_wal(0)
            insert(db, "b")
            assert ids(db) == ["a", "b", "start"]
        finally:
            db.close()
    finally:
        hold.close()


def test_a_symlink_retargeted_before_a_worker_opens_it_is_refused(
    symlinked: tuple[Path, Path],
) -> None:
    # The parent held data/x.db through the link; the link now names another file (a
    # replacement worker would resolve it there): the worker must not take it for its own.
    real, link = symlinked
    other = real.with_name("y.db")
    open_db(real).close()
    open_db(other).close()
    first = open_db(link)
    hold = HeldFiles([str(link)])
    first.close()
    try:
        expect_files(hold.files)
        link.unlink()
        link.symlink_to(other)
        db = open_db(link)
        try:
            with pytest.raises(StorageUnavailable, match="database file was removed or replaced"):
                insert(db, "a")
        finally:
            db.close()
        assert "a" not in ids_of(other)
    finally:
        hold.close()


def ids_of(path: Path) -> list[str]:
    db = open_db(path)
    try:
        return ids(db)
    finally:
        db.close()
