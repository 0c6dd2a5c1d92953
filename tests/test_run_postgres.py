"""``make run-postgres`` (tools/run_postgres.py): a throwaway PostgreSQL and a --dev provider on it.

The script is started as a user starts it (its own process, in a directory of
its own so ``var/`` lands there), serves a health call and a memory and affect
write + read whose rows are in PostgreSQL, and on SIGINT (Ctrl-C) stops the
provider and the server and deletes the server's data.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil  # type: ignore[import-untyped]  # no stubs in the dev group
import psycopg
import pytest

from bifrost.client import BifrostClient
from ratatoskr.provider.settings import redact_dsn

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "run_postgres.py"
GRANT = {"tenant": "acme"}


class Running:
    """The script's process and its output, read by a thread as it comes."""

    def __init__(self, cwd: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RATATOSKR_")}
        env["RATATOSKR_MEMORY_EMBEDDING_DIM"] = "8"
        self.proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--", "--port", "0"],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # as from a terminal: Ctrl-C reaches the script
        )
        self.lines: list[str] = []
        self.started = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if "Application startup complete" in line:
                self.started.set()

    def stop(self) -> None:
        """After a failure: the script's own stop first (it removes the server), then
        kill whatever is left (the provider runs in a session of its own)."""
        if self.proc.poll() is not None:
            return
        children = psutil.Process(self.proc.pid).children(recursive=True)
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            for child in children:
                child.kill()
            self.proc.kill()
            self.proc.wait()

    def output(self) -> str:
        return "".join(self.lines)

    def find(self, pattern: str) -> str:
        match = re.search(pattern, self.output())
        assert match is not None, self.output()
        return match.group(1)


@pytest.fixture
def home() -> Iterator[Path]:
    """The directory the script runs in. Not under pytest's tmp_path: the server runs
    as an unprivileged user (the wheel's, as root), and a pytest session starting
    beside this one makes ``/tmp/pytest-of-<user>`` owner-only again."""
    with tempfile.TemporaryDirectory(prefix="run-postgres-") as where:
        yield Path(where)


def test_run_postgres_serves_memory_and_affect_on_postgres_then_stops_clean(
    home: Path,
) -> None:
    tmp_path = home
    run = Running(tmp_path)
    try:
        deadline = time.monotonic() + 90
        while not run.started.is_set() and run.proc.poll() is None:
            assert time.monotonic() < deadline, run.output()
            time.sleep(0.05)
        assert run.started.is_set(), run.output()
        dsn = run.find(r"PostgreSQL with pgvector at (\S+)")
        base = run.find(r"serving memory at (http://127\.0\.0\.1:\d+)/memory")
        pgdata = tmp_path / "var" / "pgserver" / "pgdata"
        assert dsn.startswith("postgresql://") and str(pgdata) in dsn
        postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
        serve = [p for p in psutil.Process(run.proc.pid).children() if p.is_running()]
        assert serve, run.output()

        assert httpx.get(f"{base}/healthz", timeout=30).status_code == 200
        key = (tmp_path / "var" / "dev-heimdall.key").read_text().strip().encode()
        memory = BifrostClient(f"{base}/memory", key, actor="dev", scope=GRANT, plane="memory")
        affect = BifrostClient(f"{base}/affect", key, actor="dev", scope=GRANT, plane="affect")
        assert memory.health()["embedding_dim"] == 8
        chunk = {"id": "c1", "embedding": [1.0] + [0.0] * 7, "scope": GRANT, "content": "hi"}
        assert memory.upsert_many([chunk], idempotency_key="k1")["upserted"] == 1
        got = memory.get("c1")
        assert got is not None and (got["content"], got["revision"]) == ("hi", 1)
        affect.put_many([{"key": "mood", "scope": GRANT, "v": 1}], idempotency_key="a1")
        state = affect.get("mood")
        assert state is not None and state["v"] == 1
        memory.close()
        affect.close()
        # The rows are in PostgreSQL, not in a SQLite file beside it.
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT count(*) FROM ratatoskr_memory.memory_chunks").fetchone()
            assert row == (1,)
        assert not (tmp_path / "var" / "memory.db").exists()
        assert not (tmp_path / "var" / "affect.db").exists()

        run.proc.send_signal(signal.SIGINT)
        assert run.proc.wait(60) == 0, run.output()
        assert "Application shutdown complete" in run.output()
        assert not pgdata.exists()
        # Issue 27: var/ stays owner-only as root too, and no empty pgserver/ is left;
        # the banner said where the data was, the DSN for the operator commands too.
        assert (tmp_path / "var").stat().st_mode & 0o777 == 0o700
        assert not (tmp_path / "var" / "pgserver").exists()
        assert f"memory in {redact_dsn(dsn)} (schema ratatoskr_memory)" in run.output()
        assert f"export RATATOSKR_MEMORY_DB='{dsn}'" in run.output()
        assert not psutil.pid_exists(postmaster) or psutil.Process(postmaster).status() == (
            psutil.STATUS_ZOMBIE
        )
        assert not any(p.is_running() for p in serve)
    finally:
        run.stop()
