"""In-use detection: another process with the file open, idle, reading or writing."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from ratatoskr.sqlite import DatabaseInUse, claim_databases, database_in_use

from .conftest import Holder, make_db

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX locks")


def test_a_closed_file_is_not_in_use(tmp_path: Path) -> None:
    db = make_db(tmp_path / "t.db")
    assert database_in_use(str(db)) is False
    with claim_databases([str(db), str(tmp_path / "missing.db")]):
        pass
    assert not (tmp_path / "missing.db").exists()  # nothing is created to check it


@pytest.mark.parametrize("mode", ["idle", "readonly", "write"])
def test_another_process_with_it_open_is_seen(
    tmp_path: Path, hold: Callable[[Path, str], Holder], mode: str
) -> None:
    db = make_db(tmp_path / "t.db")
    holder = hold(db, mode)
    for _ in range(20):  # every time, not only between two commits
        assert database_in_use(str(db)) is True
    with pytest.raises(DatabaseInUse) as caught, claim_databases([str(db)]):
        pass
    if sys.platform.startswith("linux"):
        assert caught.value.pid == holder.proc.pid
        assert f"(pid {holder.proc.pid})" in caught.value.message
    holder.stop()
    assert database_in_use(str(db)) is False


def test_begin_exclusive_does_not_see_an_idle_reader(
    tmp_path: Path, hold: Callable[[Path, str], Holder]
) -> None:
    """Why the claim reads SQLite's locks instead: in WAL mode an exclusive transaction
    with no busy timeout succeeds beside a process that has the file open."""
    db = make_db(tmp_path / "t.db")
    hold(db, "idle")
    conn = apsw.Connection(str(db))
    conn.set_busy_timeout(0)
    conn.execute("BEGIN EXCLUSIVE")
    conn.execute("ROLLBACK")
    conn.close()
    assert database_in_use(str(db)) is True


def test_while_claimed_no_process_can_open_it(tmp_path: Path) -> None:
    db = make_db(tmp_path / "t.db")
    opener = (
        "import sys, apsw\n"
        "c = apsw.Connection(sys.argv[1]); c.set_busy_timeout(300)\n"
        "try:\n"
        "    c.execute('SELECT count(*) FROM items').fetchall(); print('opened')\n"
        "except apsw.BusyError:\n"
        "    print('busy')\n"
    )
    with claim_databases([str(db)]):
        started = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-c", opener, str(db)], capture_output=True, text=True, timeout=30
        )
        assert out.stdout.strip() == "busy", out.stderr
        assert time.monotonic() - started < 20
    out = subprocess.run(
        [sys.executable, "-c", opener, str(db)], capture_output=True, text=True, timeout=30
    )
    assert out.stdout.strip() == "opened"
