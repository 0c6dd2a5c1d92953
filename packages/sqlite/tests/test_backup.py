"""Online backup (VACUUM INTO) and verified restore of one plane file."""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import pytest

from ratatoskr.sqlite import (
    DatabaseInUse,
    InvalidBackup,
    MetaSetting,
    PlaneFile,
    StorageUnavailable,
    backup_database,
    restore_database,
    verify_plane_file,
)

from .conftest import PLANE, Holder, make_db, open_db


def listing(d: Path) -> dict[str, str]:
    """Every file in ``d`` with its digest (what "nothing was written" compares)."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.iterdir())
        if p.is_file()
    }


def ids(path: Path) -> set[str]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return {str(r[0]) for r in conn.execute("SELECT id FROM items")}
    finally:
        conn.close()


@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0)
    yield
    os.umask(old)


# -- backup -----------------------------------------------------------------------------


def test_backup_under_a_writer_holds_every_acknowledged_write(
    tmp_path: Path, hold: Callable[[Path, str], Holder]
) -> None:
    db = make_db(tmp_path / "t.db", n=2000)
    writer = hold(db, "write")
    deadline = time.monotonic() + 10
    while len(writer.acked) < 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    acknowledged = list(writer.acked)  # every id here was committed before the backup
    assert len(acknowledged) >= 200
    result = backup_database(str(db), str(tmp_path / "copy.db"), PLANE)
    writer.stop()
    copied = ids(tmp_path / "copy.db")
    assert set(acknowledged) <= copied
    assert {f"i{i}" for i in range(2000)} <= copied
    assert result.schema_version == 2
    assert result.bytes == (tmp_path / "copy.db").stat().st_size
    assert verify_plane_file(str(tmp_path / "copy.db"), PLANE) == 2


def test_backup_is_owner_only_whatever_the_umask(tmp_path: Path, open_umask: None) -> None:
    db = make_db(tmp_path / "t.db")
    os.chmod(db, 0o644)
    backup_database(str(db), str(tmp_path / "copy.db"), PLANE)
    assert stat.S_IMODE((tmp_path / "copy.db").stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.db", "t.db"]  # no temp left


def test_backup_leaves_deleted_content_behind(tmp_path: Path) -> None:
    db = open_db(tmp_path / "t.db")
    with db.write() as conn:
        conn.execute("INSERT INTO items (id, body) VALUES ('gone', 'SENTINEL-DELETED-TEXT')")
        conn.executemany(
            "INSERT INTO items (id, body) VALUES (?, ?)", [(f"i{i}", "b" * 500) for i in range(500)]
        )
    with db.write() as conn:
        # As a file written before secure_delete (or by another tool) would be: the
        # deleted row stays in a free page, and the backup must not carry it.
        conn.execute("PRAGMA secure_delete=OFF")
        conn.execute("DELETE FROM items WHERE id = 'gone' OR id < 'i3'")
    db.close()
    assert b"SENTINEL-DELETED-TEXT" in (tmp_path / "t.db").read_bytes()  # free pages keep it
    backup_database(str(tmp_path / "t.db"), str(tmp_path / "copy.db"), PLANE)
    data = (tmp_path / "copy.db").read_bytes()
    assert b"SENTINEL-DELETED-TEXT" not in data
    assert len(data) < (tmp_path / "t.db").stat().st_size


def test_backup_refusals_write_nothing(tmp_path: Path) -> None:
    db = make_db(tmp_path / "t.db")
    (tmp_path / "there.db").write_bytes(b"keep me")
    before = listing(tmp_path)
    with pytest.raises(StorageUnavailable, match="destination exists"):
        backup_database(str(db), str(tmp_path / "there.db"), PLANE)
    with pytest.raises(StorageUnavailable, match="directory does not exist"):
        backup_database(str(db), str(tmp_path / "no" / "copy.db"), PLANE)
    with pytest.raises(StorageUnavailable, match="does not exist"):
        backup_database(str(tmp_path / "missing.db"), str(tmp_path / "copy.db"), PLANE)
    with pytest.raises(InvalidBackup, match="holds the test plane, not other"):
        backup_database(str(db), str(tmp_path / "copy.db"), PlaneFile("other", 1))
    wrong_dim = PlaneFile("test", 2, {"dim": MetaSetting("16", "TEST_DIM")})
    with pytest.raises(InvalidBackup, match="was made with dim=8, but TEST_DIM=16"):
        backup_database(str(db), str(tmp_path / "copy.db"), wrong_dim)
    with pytest.raises(InvalidBackup, match="newer than this release knows"):
        backup_database(str(db), str(tmp_path / "copy.db"), PlaneFile("test", 1))
    assert listing(tmp_path) == before


def test_backup_overwrite_replaces_only_after_verification(tmp_path: Path) -> None:
    db = make_db(tmp_path / "t.db", n=7)
    dest = tmp_path / "copy.db"
    dest.write_bytes(b"old backup")
    with pytest.raises(InvalidBackup):
        backup_database(str(db), str(dest), PlaneFile("other", 1), overwrite=True)
    assert dest.read_bytes() == b"old backup"
    backup_database(str(db), str(dest), PLANE, overwrite=True)
    assert ids(dest) == {f"i{i}" for i in range(7)}


# -- verification -----------------------------------------------------------------------


def test_verification_names_what_is_wrong(tmp_path: Path) -> None:
    good = make_db(tmp_path / "good.db")
    junk = tmp_path / "junk.db"
    junk.write_bytes(os.urandom(8192))
    with pytest.raises(InvalidBackup, match="not a SQLite database"):
        verify_plane_file(str(junk), PLANE)
    torn = tmp_path / "torn.db"
    torn.write_bytes(good.read_bytes()[: 4096 * 2])
    with pytest.raises(InvalidBackup):
        verify_plane_file(str(torn), PLANE)
    plain = tmp_path / "plain.db"
    conn = apsw.Connection(str(plain))
    conn.execute("CREATE TABLE x (a)")
    conn.close()
    with pytest.raises(InvalidBackup, match="holds no ratatoskr plane"):
        verify_plane_file(str(plain), PLANE)
    meta_less = PlaneFile("test", 2, {"size": MetaSetting("1", "TEST_SIZE")})
    with pytest.raises(InvalidBackup, match="records no size"):
        verify_plane_file(str(good), meta_less)


def test_verification_runs_the_full_integrity_check(tmp_path: Path) -> None:
    db = make_db(tmp_path / "t.db", n=300)
    conn = apsw.Connection(str(db))
    conn.execute("CREATE INDEX items_n ON items(n)")
    # The index now claims to cover another column: every page reads, but the index and
    # its table disagree, which only the integrity check's cross-check finds.
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute(
        "UPDATE sqlite_schema SET sql = 'CREATE INDEX items_n ON items(body)'"
        " WHERE name = 'items_n'"
    )
    conn.close()
    with pytest.raises(InvalidBackup, match="fails SQLite's integrity check"):
        verify_plane_file(str(db), PLANE)
    # A page overwritten with garbage is refused too (SQLite reports it as corrupt).
    torn = make_db(tmp_path / "torn.db", n=3000)
    raw = bytearray(torn.read_bytes())
    raw[4096 * 3 : 4096 * 3 + 400] = b"\xff" * 400
    torn.write_bytes(bytes(raw))
    with pytest.raises(InvalidBackup, match=r"integrity check|damaged"):
        verify_plane_file(str(torn), PLANE)


# -- restore ----------------------------------------------------------------------------


def test_restore_replaces_the_target_owner_only(tmp_path: Path, open_umask: None) -> None:
    backup = make_db(tmp_path / "backup.db", n=5)
    os.chmod(backup, 0o644)
    (tmp_path / "live").mkdir()
    target = make_db(tmp_path / "live" / "t.db", n=9)
    result = restore_database(str(backup), str(target), PLANE)
    assert result.replaced and result.schema_version == 2
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in target.parent.iterdir()) == ["t.db"]
    assert ids(target) == {f"i{i}" for i in range(5)}
    assert backup.stat().st_mode & 0o777 == 0o644  # the backup is only read


def test_restore_creates_a_missing_target(tmp_path: Path) -> None:
    backup = make_db(tmp_path / "backup.db", n=4)
    result = restore_database(str(backup), str(tmp_path / "new.db"), PLANE)
    assert not result.replaced
    assert ids(tmp_path / "new.db") == {f"i{i}" for i in range(4)}


def test_restore_refusals_leave_the_target_untouched(tmp_path: Path) -> None:
    (tmp_path / "live").mkdir()
    target = make_db(tmp_path / "live" / "t.db", n=9)
    other = make_db(tmp_path / "other.db", plane="other")
    wrong_dim = make_db(tmp_path / "dim16.db", dim="16")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"SQLite format 3\0" + os.urandom(4000))
    live = make_db(tmp_path / "livecopy.db")
    (tmp_path / "livecopy.db-wal").write_bytes(b"")
    before, before_live = listing(tmp_path), listing(tmp_path / "live")
    cases: list[tuple[Path, str]] = [
        (other, "holds the other plane, not test"),
        (wrong_dim, "was made with dim=16, but TEST_DIM=8"),
        (junk, "not a SQLite database"),
        (live, "a live database, not a backup"),
        (tmp_path / "missing.db", "does not exist"),
        (target, "is the target database itself"),
    ]
    for source, message in cases:
        with pytest.raises((InvalidBackup, StorageUnavailable), match=message):
            restore_database(str(source), str(target), PLANE)
    with pytest.raises(InvalidBackup, match="newer than this release"):
        restore_database(str(make_db(tmp_path / "v2.db")), str(target), PlaneFile("test", 1))
    (tmp_path / "v2.db").unlink()
    assert listing(tmp_path) == before
    assert listing(tmp_path / "live") == before_live


@pytest.mark.slow
def test_restore_refuses_a_target_in_use(
    tmp_path: Path, hold: Callable[[Path, str], Holder]
) -> None:
    (tmp_path / "live").mkdir()
    target = make_db(tmp_path / "live" / "t.db", n=9)
    side = make_db(tmp_path / "live" / "t.db.side", n=1)
    backup = make_db(tmp_path / "backup.db", n=5)
    for mode in ("idle", "write"):
        holder = hold(target, mode)
        with pytest.raises(DatabaseInUse):
            restore_database(str(backup), str(target), PLANE)
        holder.stop()
    assert ids(target) >= {f"i{i}" for i in range(9)}
    holder = hold(side, "idle")  # a file the caller says belongs to the target
    with pytest.raises(DatabaseInUse):
        restore_database(str(backup), str(target), PLANE, also_claim=[str(side)])
    holder.stop()
    # No temporary file left behind (the killed holders left their -wal/-shm).
    assert not [p.name for p in target.parent.iterdir() if p.name.startswith(".")]
    restore_database(str(backup), str(target), PLANE, also_claim=[str(side)])
    assert ids(target) == {f"i{i}" for i in range(5)}


def test_restore_removes_a_stale_wal_so_it_is_not_replayed(
    tmp_path: Path, hold: Callable[[Path, str], Holder]
) -> None:
    (tmp_path / "live").mkdir()
    target = make_db(tmp_path / "live" / "t.db", n=1)
    writer = hold(target, "write")
    while len(writer.acked) < 50:
        time.sleep(0.01)
    writer.proc.send_signal(signal.SIGKILL)  # a crash: the WAL keeps committed frames
    writer.proc.wait(10)
    assert (tmp_path / "live" / "t.db-wal").stat().st_size > 0
    backup = make_db(tmp_path / "backup.db", n=3)
    restore_database(str(backup), str(target), PLANE)
    assert sorted(p.name for p in target.parent.iterdir()) == ["t.db"]
    assert ids(target) == {"i0", "i1", "i2"}
    db = open_db(target)  # and it opens as a plane file again
    assert db.schema_version() == 2
    db.close()


def test_a_failed_rename_puts_the_stale_files_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "live").mkdir()
    target = make_db(tmp_path / "live" / "t.db", n=2)
    (tmp_path / "live" / "t.db-wal").write_bytes(b"stale wal")
    before = listing(tmp_path / "live")
    real_replace = os.replace

    def failing(src: str, dst: str) -> None:
        if dst == str(target):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OSError, match="No space"):
        restore_database(str(make_db(tmp_path / "b.db")), str(target), PLANE)
    assert listing(tmp_path / "live") == before
