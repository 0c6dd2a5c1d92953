"""``make run-postgres-ha`` (tools/run_postgres_ha.py): the failover it documents, done by hand.

The script is started as a user starts it; a write goes through; then the two
commands it prints (kill the primary, promote the standby) are run as printed,
in a shell; the same provider, never restarted, takes writes again and still
has the first one; Ctrl-C stops everything and deletes the servers' data.
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
from pathlib import Path

import psutil  # type: ignore[import-untyped]  # no stubs in the dev group
import pytest

from bifrost.client import BifrostClient
from bifrost.errors import BifrostError

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "run_postgres_ha.py"
GRANT = {"tenant": "acme"}


def test_the_printed_failover_keeps_every_acknowledged_write() -> None:
    with tempfile.TemporaryDirectory(prefix="run-postgres-ha-") as where:
        home = Path(where)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RATATOSKR_")}
        env["RATATOSKR_MEMORY_EMBEDDING_DIM"] = "8"
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--", "--port", "0"],
            cwd=home,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        lines: list[str] = []
        started = threading.Event()

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if "Application startup complete" in line:
                    started.set()

        threading.Thread(target=pump, daemon=True).start()
        try:
            deadline = time.monotonic() + 120
            while not started.wait(0.1) and proc.poll() is None:
                assert time.monotonic() < deadline, "".join(lines)
            assert started.is_set(), "".join(lines)
            out = "".join(lines)
            base = re.search(r"serving memory at (http://127\.0\.0\.1:\d+)/memory", out)
            data = re.search(r"\(data in (\S+), deleted on exit\)", out)
            kill = re.search(r"\n +(kill -KILL .+)\n", out)
            promote = re.search(r"\n +(.*pg_ctl -D \S+ promote)\n", out)
            assert base and data and kill and promote, out
            key = (home / "var" / "dev-heimdall.key").read_text().strip().encode()
            memory = BifrostClient(
                f"{base.group(1)}/memory", key, actor="dev", scope=GRANT, plane="memory"
            )
            chunk = {"id": "c1", "embedding": [1.0] + [0.0] * 7, "scope": GRANT, "content": "a"}
            assert memory.upsert_many([chunk], idempotency_key="k1")["upserted"] == 1

            subprocess.run(kill.group(1), shell=True, check=True)
            subprocess.run(promote.group(1), shell=True, check=True, capture_output=True)
            second = {**chunk, "id": "c2", "content": "b"}
            refusals: set[int] = set()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    memory.upsert_many([second], idempotency_key="k2")
                    break
                except BifrostError as exc:  # the retry the 503 asks for
                    refusals.add(exc.status)
                    time.sleep(0.1)
            assert refusals <= {503}
            assert [g["content"] for g in memory.get_many(["c1", "c2"])] == ["a", "b"]
            memory.close()

            proc.send_signal(signal.SIGINT)
            assert proc.wait(60) == 0, "".join(lines)
            assert not Path(data.group(1)).exists()
        finally:
            if proc.poll() is None:
                for child in psutil.Process(proc.pid).children(recursive=True):
                    child.kill()
                proc.kill()
                proc.wait()
