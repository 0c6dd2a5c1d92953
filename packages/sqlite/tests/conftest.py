"""Fixtures for the file-level tests: a small plane (``test``) and processes holding it."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ratatoskr.sqlite import Database, IdempotencyLedger, MetaSetting, Migration, PlaneFile

HOLDER = Path(__file__).with_name("holder.py")
LEDGER = IdempotencyLedger("test_idempotency")
MIGRATIONS = [
    Migration(
        1,
        "items, tombstones, ledger",
        "CREATE TABLE items (id TEXT PRIMARY KEY, body TEXT NOT NULL);"
        "CREATE TABLE test_tombstones (id TEXT PRIMARY KEY, seq INTEGER NOT NULL);"
        + LEDGER.create_sql(),
    ),
    Migration(2, "items_n", "ALTER TABLE items ADD COLUMN n INTEGER NOT NULL DEFAULT 0"),
]
PLANE = PlaneFile("test", 2, {"dim": MetaSetting("8", "TEST_DIM")})


def open_db(path: Path | str, plane: str = "test", dim: str = "8") -> Database:
    return Database(
        str(path), plane=plane, migrations=MIGRATIONS, meta={"dim": MetaSetting(dim, "TEST_DIM")}
    )


def make_db(path: Path, n: int = 50, plane: str = "test", dim: str = "8") -> Path:
    """A closed plane file holding ``n`` items."""
    db = open_db(path, plane, dim)
    with db.write() as conn:
        conn.executemany(
            "INSERT INTO items (id, body) VALUES (?, ?)", [(f"i{i}", "b" * 100) for i in range(n)]
        )
    db.close()
    return path


@dataclass
class Holder:
    proc: subprocess.Popen[str]
    acked: list[str] = field(default_factory=list)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def hold() -> Iterator[Callable[[Path, str], Holder]]:
    """Start a ``holder.py`` process on a file; it is killed at the end of the test."""
    started: list[Holder] = []

    def start(path: Path, mode: str = "idle") -> Holder:
        proc = subprocess.Popen(
            [sys.executable, str(HOLDER), mode, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        holder = Holder(proc)

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                holder.acked.append(line.strip())

        threading.Thread(target=pump, daemon=True).start()
        started.append(holder)
        return holder

    yield start
    for holder in started:
        holder.stop()


@pytest.fixture
def symlinked(tmp_path: Path) -> tuple[Path, Path]:
    """(the file, a symlink naming it): ``data/x.db`` and ``x.db`` beside ``data/``, the
    file not created yet (SQLite keeps -wal/-shm beside the file, not the link)."""
    real = tmp_path / "data" / "x.db"
    real.parent.mkdir()
    link = tmp_path / "x.db"
    link.symlink_to(real)
    return real, link
