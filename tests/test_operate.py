"""Operating a running provider over real sockets: ``ratatoskr backup`` while a writer
process writes (every write acknowledged before the backup began is in the copy),
``ratatoskr restore`` refused while a provider has the file open (idle or writing),
``ratatoskr stats`` beside it, and ``GET /readyz`` when a database file goes away or
cannot be used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw
import httpx
import pytest

from bifrost.client import BifrostClient
from ratatoskr.provider.testing import ServerProcess

from .conftest import KEY, start_server

pytestmark = pytest.mark.slow
GRANT = {"tenant": "acme"}

# A writer process: one acknowledged upsert (memory) or put (affect) after another,
# printing each id once its call returned 200, until killed.
WRITER = """
import sys
from bifrost.client import BifrostClient
base, plane, key, tag = sys.argv[1:5]
client = BifrostClient(f"{base}/{plane}", key.encode(), actor="writer",
                       scope={"tenant": "acme"}, plane=plane)
i = 0
while True:
    rid = f"{tag}-{i}"
    if plane == "memory":
        emb = [1.0 if d == i % 8 else 0.1 for d in range(8)]
        client.upsert_many([{"id": rid, "embedding": emb, "scope": {"tenant": "acme"},
                             "content": "written while backing up"}], idempotency_key=rid)
    else:
        client.put_many([{"key": rid, "scope": {"tenant": "acme"}, "n": i}], idempotency_key=rid)
    print(rid, flush=True)
    i += 1
"""


class Writer:
    def __init__(self, base: str, plane: str, tag: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, base, plane, KEY, tag],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.acked: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.acked.append(line.strip())

    def wait_for(self, n: int, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < n:
            assert self.proc.poll() is None, "the writer died"
            assert time.monotonic() < deadline, "the writer is too slow"
            time.sleep(0.01)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


@contextmanager
def writing(base: str, plane: str, tag: str) -> Iterator[Writer]:
    writer = Writer(base, plane, tag)
    try:
        yield writer
    finally:
        writer.stop()


RunCli = Callable[..., subprocess.CompletedProcess[str]]


def keys_in(path: Path, sql: str) -> set[str]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return {str(r[0]) for r in conn.execute(sql)}
    finally:
        conn.close()


def memory_client(base: str) -> BifrostClient:
    return BifrostClient(f"{base}/memory", KEY.encode(), actor="t", scope=GRANT, plane="memory")


def seed(base: str, n: int) -> None:
    client = memory_client(base)
    for start in range(0, n, 500):
        records: list[dict[str, Any]] = [
            {"id": f"seed-{i}", "embedding": [0.5] * 8, "scope": GRANT, "content": "x" * 300}
            for i in range(start, min(n, start + 500))
        ]
        client.upsert_many(records, idempotency_key=f"seed-{start}")
    client.close()


def test_backup_while_writers_write(
    ratatoskr_cli: RunCli, server: ServerProcess, server_env: dict[str, str], tmp_path: Path
) -> None:
    seed(server.base_url, 3000)
    with (
        writing(server.base_url, "memory", "m") as memory,
        writing(server.base_url, "affect", "a") as affect,
    ):
        memory.wait_for(100)
        affect.wait_for(100)
        for plane, writer, sql in (
            ("memory", memory, "SELECT chunk_id FROM memory_chunks"),
            ("affect", affect, "SELECT key FROM affect_current"),
        ):
            acknowledged = list(writer.acked)  # all returned 200 before the backup starts
            copy = tmp_path / f"{plane}.bak"
            done = ratatoskr_cli(
                ["backup", "--plane", plane, "--to", str(copy)], server_env, tmp_path
            )
            assert done.returncode == 0, done.stderr
            after = len(writer.acked)
            stored = keys_in(copy, sql)
            assert set(acknowledged) <= stored, f"{plane}: acknowledged writes missing"
            assert after > len(acknowledged), f"{plane}: the writer was held up"
            assert (copy.stat().st_mode & 0o777) == 0o600
        assert {f"seed-{i}" for i in range(3000)} <= keys_in(
            tmp_path / "memory.bak", "SELECT chunk_id FROM memory_chunks"
        )
    # The replay cache is not part of a backup.
    assert sorted(p.name for p in tmp_path.glob("*.bak*")) == ["affect.bak", "memory.bak"]


def test_restore_refused_while_a_provider_has_the_file_open(
    ratatoskr_cli: RunCli, server: ServerProcess, server_env: dict[str, str], tmp_path: Path
) -> None:
    seed(server.base_url, 10)
    backup = tmp_path / "memory.bak"
    assert (
        ratatoskr_cli(
            ["backup", "--plane", "memory", "--to", str(backup)], server_env, tmp_path
        ).returncode
        == 0
    )
    client = memory_client(server.base_url)
    client.upsert_many(
        [{"id": "newer", "embedding": [0.5] * 8, "scope": GRANT, "content": "after"}],
        idempotency_key="newer",
    )
    restore = ["restore", "--plane", "memory", "--from", str(backup)]
    for state in ("idle", "writing"):
        with writing(server.base_url, "memory", "w") if state == "writing" else _nothing():
            done = ratatoskr_cli(restore, server_env, tmp_path)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert "RATATOSKR_MEMORY_DB" in lines[0] and "open in another process" in lines[0]
        assert f"pid {server.proc.pid}" in lines[0] or sys.platform != "linux"
    assert client.get("newer") is not None  # the served file was not replaced
    assert httpx.get(f"{server.base_url}/readyz").status_code == 200
    client.close()
    server.stop()
    done = ratatoskr_cli(restore, server_env, tmp_path)
    assert done.returncode == 0, done.stderr
    again = start_server(["serve"], server_env, tmp_path)
    try:
        restored = memory_client(again.base_url)
        assert restored.get("newer") is None
        assert restored.get("seed-3") is not None
        restored.close()
    finally:
        again.stop()


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def test_stats_beside_a_serving_provider(
    ratatoskr_cli: RunCli, server: ServerProcess, server_env: dict[str, str], tmp_path: Path
) -> None:
    seed(server.base_url, 700)
    with writing(server.base_url, "memory", "s") as writer:
        writer.wait_for(20)
        done = ratatoskr_cli(["stats", "--json"], server_env, tmp_path)
        seen = len(writer.acked)
    assert done.returncode == 0, done.stderr
    memory = json.loads(done.stdout)["planes"]["memory"]
    assert memory["tables"]["memory_chunks"]["rows"] >= 700 + 20
    assert memory["tables"]["memory_chunks"]["rows"] <= 700 + seen + 1
    assert memory["replay"]["entries"] >= 20  # one token id per call
    assert memory["wal_bytes"] > 0


def test_readyz_when_a_file_goes_or_cannot_be_used(
    server: ServerProcess, server_env: dict[str, str], tmp_path: Path
) -> None:
    url = f"{server.base_url}/readyz"
    ready = httpx.get(url)
    assert ready.status_code == 200
    assert ready.json() == {
        "status": "ready",
        "planes": {"memory": "ready", "affect": "ready", "vmp": "ready"},
    }
    affect = Path(server_env["RATATOSKR_AFFECT_DB"])
    affect.rename(tmp_path / "moved.db")
    gone = httpx.get(url)
    assert gone.status_code == 503
    assert gone.json() == {
        "status": "unready",
        "planes": {
            "memory": "ready",
            "affect": "database file missing or replaced",
            "vmp": "ready",
        },
        "failed": ["affect"],
    }
    assert str(tmp_path) not in gone.text
    (tmp_path / "moved.db").rename(affect)
    assert httpx.get(url).status_code == 200
    memory = Path(server_env["RATATOSKR_MEMORY_DB"])
    with unusable(memory):
        bad = httpx.get(url)
        assert bad.status_code == 503
        assert bad.json()["failed"] == ["memory"]
        assert bad.json()["planes"]["memory"] == "database file not readable and writable"
    assert httpx.get(url).status_code == 200
    assert any("readyz: affect not ready" in line for line in server.output)


@contextmanager
def unusable(path: Path) -> Iterator[None]:
    """``path`` not readable and writable for the provider: ``chmod 000`` for a normal
    user; root ignores modes, so for root a read-only bind mount of the file over itself."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    done = subprocess.run(
        ["mount", "--bind", "-o", "ro", str(path), str(path)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip("cannot bind-mount read-only here")
    try:
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True)


def _kill_mid_copy(args: list[str], env: dict[str, str], cwd: Path, where: Path) -> None:
    """Run ``ratatoskr <args>`` and SIGKILL it once its temporary copy in ``where`` has
    a MiB in it (issue 22, finding 6)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("RATATOSKR_")}
    full.update(env)
    proc = subprocess.Popen([sys.executable, "-m", "ratatoskr.provider", *args], env=full, cwd=cwd)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            copies = [p for p in where.iterdir() if p.name.endswith(("-partial", "-restoring"))]
            if copies and copies[0].stat().st_size > 1 << 20:
                break
            time.sleep(0.001)
        assert proc.poll() is None, "the command ended before it could be killed"
    finally:
        proc.kill()
        proc.wait()


def _leftovers(where: Path) -> list[str]:
    return sorted(n for n in os.listdir(where) if ".ratatoskr-" in n or ".old-" in n)


def test_killed_backup_and_restore_leave_nothing_after_the_next_start(
    ratatoskr_cli: RunCli, server_env: dict[str, str], tmp_path: Path
) -> None:
    from bifrost.context import DispatchContext  # noqa: PLC0415
    from ratatoskr.memory import open_memory_store  # noqa: PLC0415

    store = open_memory_store(server_env["RATATOSKR_MEMORY_DB"], embedding_dim=8)
    ctx = DispatchContext(actor="seed", scope=GRANT)
    for start in range(0, 8000, 1000):
        store.upsert_many(
            [
                {
                    "id": f"big-{i}",
                    "embedding": [0.5] * 8,
                    "scope": GRANT,
                    "content": os.urandom(2000).hex(),
                }
                for i in range(start, start + 1000)
            ],
            idempotency_key=f"big-{start}",
            ctx=ctx,
        )
    store.close()
    kept = tmp_path / "kept"
    kept.mkdir()
    done = ratatoskr_cli(
        ["backup", "--plane", "memory", "--to", str(kept / "full.db")], server_env, tmp_path
    )
    assert done.returncode == 0, done.stderr
    # A backup killed with its destination beside the live file, and a restore killed
    # mid-copy: before the fix both left a hidden full copy there for good.
    _kill_mid_copy(
        ["backup", "--plane", "memory", "--to", str(tmp_path / "copy.db")],
        server_env,
        tmp_path,
        tmp_path,
    )
    _kill_mid_copy(
        ["restore", "--plane", "memory", "--from", str(kept / "full.db")],
        server_env,
        tmp_path,
        tmp_path,
    )
    assert _leftovers(tmp_path)
    server = start_server(["serve"], server_env, tmp_path)
    try:
        assert _leftovers(tmp_path) == []
        client = memory_client(server.base_url)
        assert len(client.get_many(["big-0", "big-7999"])) == 2
        client.close()
    finally:
        server.close()
    # The next backup and restore clean their own directories too.
    _kill_mid_copy(
        ["backup", "--plane", "memory", "--to", str(kept / "again.db")],
        server_env,
        tmp_path,
        kept,
    )
    assert _leftovers(kept)
    done = ratatoskr_cli(
        ["backup", "--plane", "memory", "--to", str(kept / "b.db")], server_env, tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert _leftovers(kept) == []
    _kill_mid_copy(
        ["restore", "--plane", "memory", "--from", str(kept / "b.db")],
        server_env,
        tmp_path,
        tmp_path,
    )
    done = ratatoskr_cli(
        ["restore", "--plane", "memory", "--from", str(kept / "b.db")], server_env, tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert _leftovers(tmp_path) == []
