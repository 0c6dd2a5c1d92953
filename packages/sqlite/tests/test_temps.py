"""What killed backups and restores leave (ratatoskr.sqlite.temps): a SIGKILL mid-copy
leaves a hidden full copy, which the next backup, restore or open in that directory
removes; a temporary whose writer runs is never touched; a restore killed after parking
the live file's -wal gives it back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest

from ratatoskr.sqlite import Database, backup_database, restore_database
from ratatoskr.sqlite.temps import held_temp, parked_name, remove_stale_temps

from .conftest import MIGRATIONS, PLANE, make_db, open_db

CHILD = """
import sys
from ratatoskr.sqlite import MetaSetting, PlaneFile, backup_database, restore_database
plane = PlaneFile("test", 2, {"dim": MetaSetting("8", "TEST_DIM")})
what, source, dest = sys.argv[1:4]
(backup_database if what == "backup" else restore_database)(source, dest, plane)
"""


def temps(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if "ratatoskr-" in n or ".old-" in n)


def big_db(path: Path) -> Path:
    """A plane file of ~40 MB, so that a copy takes long enough to be killed inside."""
    db = open_db(path)
    with db.write() as conn:
        conn.executemany(
            "INSERT INTO items (id, body) VALUES (?, ?)",
            ((f"i{i}", os.urandom(1000).hex()) for i in range(20_000)),
        )
    db.close()
    return path


def kill_mid_copy(what: str, source: Path, dest: Path, suffix: str) -> None:
    """Run a backup or restore in a child and SIGKILL it once its copy has bytes."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, what, str(source), str(dest)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            copies = [p for p in dest.parent.iterdir() if p.name.endswith(suffix)]
            if copies and copies[0].stat().st_size > 1 << 20:
                break
            time.sleep(0.001)
        assert proc.poll() is None, "the child finished before it could be killed"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


@pytest.mark.slow
def test_a_killed_backup_leaves_a_copy_the_next_backup_removes(tmp_path: Path) -> None:
    (tmp_path / "live").mkdir()
    source = big_db(tmp_path / "live" / "x.db")
    out = tmp_path / "backups"
    out.mkdir()
    kill_mid_copy("backup", source, out / "b1.db", ".ratatoskr-partial")
    # Before the fix too: what the issue found (and the copy's -journal).
    assert any(n.endswith(".ratatoskr-partial") for n in temps(out))
    assert not (out / "b1.db").exists()
    backup_database(str(source), str(out / "b2.db"), PLANE)
    assert temps(out) == []
    assert sorted(os.listdir(out)) == ["b2.db"]


@pytest.mark.slow
def test_a_killed_backup_beside_the_live_file_is_removed_at_the_next_open(
    tmp_path: Path,
) -> None:
    source = big_db(tmp_path / "x.db")
    kill_mid_copy("backup", source, tmp_path / "copy.db", ".ratatoskr-partial")
    assert temps(tmp_path)
    open_db(source).close()  # what a provider's start does
    assert temps(tmp_path) == []


@pytest.mark.slow
def test_a_killed_restore_is_cleaned_at_the_next_open_and_the_next_restore(
    tmp_path: Path,
) -> None:
    backup = big_db(tmp_path / "backup.db")
    (tmp_path / "live").mkdir()
    target = make_db(tmp_path / "live" / "x.db", n=5)
    kill_mid_copy("restore", backup, target, ".ratatoskr-restoring")
    assert temps(target.parent)
    db = open_db(target)  # the target is as it was, and the copy is gone
    with db.read() as conn:
        assert conn.execute("SELECT count(*) FROM items").fetchall() == [(5,)]
    db.close()
    assert temps(target.parent) == []
    kill_mid_copy("restore", backup, target, ".ratatoskr-restoring")
    assert temps(target.parent)
    restore_database(str(backup), str(target), PLANE)
    assert temps(target.parent) == []
    assert sorted(os.listdir(target.parent)) == ["x.db"]


def test_a_temporary_in_use_is_left_alone(tmp_path: Path) -> None:
    with held_temp(str(tmp_path / "x.db"), "partial") as path:
        Path(path).write_bytes(b"copy")
        assert remove_stale_temps(str(tmp_path)) == []
        assert Path(path).exists()
    assert temps(tmp_path) == []


def test_names_of_other_files_are_never_removed(tmp_path: Path) -> None:
    keep = [".x.db.partial", "x.db.abcdefgh.partial", ".x.db.abcdefgh.partialx", "notes.txt"]
    for name in keep:
        (tmp_path / name).write_bytes(b"mine")
    (tmp_path / ".x.db.abcdefgh.partial").write_bytes(b"an earlier release's")
    assert remove_stale_temps(str(tmp_path)) == [".x.db.abcdefgh.partial"]
    assert sorted(os.listdir(tmp_path)) == sorted(keep)


@pytest.mark.slow
def test_a_restore_killed_after_parking_the_wal_gives_it_back(tmp_path: Path) -> None:
    target = tmp_path / "x.db"
    make_db(target, n=3)
    # A writer killed with its last commit only in the -wal.
    script = (
        "import apsw, os, sys\n"
        "c = apsw.Connection(sys.argv[1])\n"
        "c.execute('PRAGMA journal_mode=WAL')\n"
        "c.execute('PRAGMA wal_autocheckpoint=0')\n"
        "c.execute(\"INSERT INTO items (id, body) VALUES ('in-wal', 'x')\")\n"
        "os.kill(os.getpid(), 9)\n"
    )
    subprocess.run([sys.executable, "-c", script, str(target)], check=False)
    assert Path(f"{target}-wal").stat().st_size > 0
    # The restore's copy exists (its rename never happened) and the -wal is parked.
    temp = tmp_path / ".x.db.k1llme00.ratatoskr-restoring"
    temp.write_bytes(b"half a copy")
    for suffix in ("-wal", "-shm"):
        os.replace(f"{target}{suffix}", parked_name(str(temp), suffix))
    db = Database(str(target), plane="test", migrations=MIGRATIONS)
    with db.read() as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM items ORDER BY id")]
    db.close()
    assert "in-wal" in ids and len(ids) == 4
    assert temps(tmp_path) == []
    conn = apsw.Connection(str(target))
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    conn.close()
