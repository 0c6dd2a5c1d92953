"""A plane's ``-wal`` removed or replaced under a running provider (issue 22, finding 3).

SQLite keeps committing into the WAL it has open after the file was unlinked: before
the fix every later memory write was acknowledged and lost at the next SIGKILL. Now
each write compares the ``-wal`` and ``-shm`` with the ones opened before its COMMIT
(ratatoskr.sqlite.guard), so nothing is acknowledged, and ``/readyz`` names the file
(by role, never by path). Over real HTTP, with one and two workers.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from ratatoskr.provider.testing import STARTED

from .reliability.support import (
    affect_client,
    base,
    check_affect_file,
    check_memory_file,
    check_vmp_file,
    http,
    memory_client,
    provider_env,
    running,
    vmp_client,
    wait_for,
)
from .reliability.test_storage_faults import aff_batch, mem_batch, outcome

SCOPE = {"tenant": "t"}


def _readyz(server: Any, **headers: str) -> httpx.Response:
    with http() as client:
        return client.get(f"{server.base_url}/readyz", headers=headers)


def _kill_and_check_files(server: Any, env: dict[str, str]) -> None:
    """SIGKILL the provider; what a restart opens is then a sound file of each plane
    holding every write acknowledged before the removal and none from after it (4
    batches per plane were; none after)."""
    log = server.log()
    os.killpg(server.pid, signal.SIGKILL)
    server.proc.wait(10)
    assert "Traceback" not in log
    assert check_memory_file(env["RATATOSKR_MEMORY_DB"]) == 4 * 8
    assert check_affect_file(env["RATATOSKR_AFFECT_DB"]) == 4 * 8
    assert check_vmp_file(env["RATATOSKR_VMP_DB"]) == 4


def _writes(server: Any, plane: str, n: int, first: int = 1000) -> list[tuple[Any, ...]]:
    """``n`` writes to ``plane``, each over a new connection (so both workers get some)."""
    results = []
    for i in range(first, first + n):
        call: Callable[[], Any]
        if plane == "vmp":
            client: Any = vmp_client(base(server, "vmp"))
            call = lambda: client.upsert_vector([float(i), 1.0, 2.0, 3.0])  # noqa: B023, E731
        elif plane == "memory":
            client = memory_client(base(server, "memory"), scope=SCOPE)
            call = lambda: client.upsert_many(mem_batch(i))  # noqa: B023, E731
        else:
            client = affect_client(base(server, "affect"), scope=SCOPE)
            call = lambda: client.put_many(aff_batch(i))  # noqa: B023, E731
        try:
            results.append(outcome(call))
        finally:
            client.close()
    return results


def _swap(env: dict[str, str], tmp_path: Path) -> None:
    """memory: -wal unlinked; affect: -wal replaced by another file; vmp: -shm unlinked."""
    Path(env["RATATOSKR_MEMORY_DB"] + "-wal").unlink()
    affect_wal = Path(env["RATATOSKR_AFFECT_DB"] + "-wal")
    affect_wal.rename(tmp_path / "elsewhere")
    affect_wal.write_bytes(b"")
    Path(env["RATATOSKR_VMP_DB"] + "-shm").unlink()


def _assert_not_ready(gone: httpx.Response, tmp_path: Path) -> None:
    assert gone.status_code == 503
    assert gone.json()["planes"] == {
        "memory": "database -wal file missing or replaced",
        "affect": "database -wal file missing or replaced",
        "vmp": "database -shm file missing or replaced",
    }
    assert str(tmp_path) not in gone.text


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_a_removed_or_replaced_wal_is_never_acknowledged_into(
    ratatoskr_cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path, workers: int
) -> None:
    env = provider_env(tmp_path)
    with running(tmp_path, env, "--workers", str(workers)) as server:
        for plane in ("memory", "affect", "vmp"):
            assert all(r[0] == "ok" for r in _writes(server, plane, 4)), plane
        ready = _readyz(server)
        assert ready.status_code == 200, ready.text
        # What is acknowledged so far is copied into the database files (the operator's
        # `compact` ends with a TRUNCATE checkpoint): what a removed WAL still held is
        # lost with it, whatever the provider does.
        done = ratatoskr_cli(["compact"], env, tmp_path)
        assert done.returncode == 0, done.stderr
        _swap(env, tmp_path)
        for plane in ("memory", "affect", "vmp"):
            results = _writes(server, plane, 12, first=2000)
            acked = [r for r in results if r[0] == "ok"]
            assert acked == [], (plane, len(acked))  # before the fix: all 12 acknowledged
            # A typed server error (503 bifrost.unavailable; VMP's INTERNAL_ERROR 500).
            assert all(500 <= r[0] < 600 for r in results), (plane, results[:2])
        for _ in range(2 * workers):  # every worker answers the same
            gone = _readyz(server, Connection="close")
            _assert_not_ready(gone, tmp_path)
        _kill_and_check_files(server, env)
    with running(tmp_path, env, "--workers", str(workers)) as server:
        assert _readyz(server).status_code == 200
        for plane in ("memory", "affect", "vmp"):
            assert all(r[0] == "ok" for r in _writes(server, plane, 2)), plane


def _workers(server: Any) -> set[int]:
    """The pids of the server's worker processes (multiprocessing's spawned children,
    not its resource tracker)."""
    pids = set()
    for task in Path(f"/proc/{server.pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            if b"spawn_main" in cmdline:
                pids.add(int(child))
    return pids


@pytest.mark.slow
def test_a_worker_started_after_the_wal_was_replaced_acknowledges_nothing(
    ratatoskr_cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """A replacement worker (one died after the swap) found the new files at the paths:
    before the fix it took them for its own and acknowledged every write, while its
    sibling still had the old ``-wal`` open (two WALs under one ``-shm``)."""
    env = provider_env(tmp_path)
    with running(tmp_path, env, "--workers", "2") as server:
        for plane in ("memory", "affect", "vmp"):
            assert all(r[0] == "ok" for r in _writes(server, plane, 4)), plane
        assert wait_for(lambda: len(_workers(server)) == 2, timeout=30)
        done = ratatoskr_cli(["compact"], env, tmp_path)
        assert done.returncode == 0, done.stderr
        _swap(env, tmp_path)
        dead, sibling = sorted(_workers(server))
        started = server.log().count(STARTED)
        os.kill(dead, signal.SIGKILL)
        assert wait_for(lambda: "starting a replacement" in server.log(), timeout=30)
        assert wait_for(lambda: server.log().count(STARTED) > started, timeout=60)
        (replacement,) = _workers(server) - {sibling}
        # Only the replacement accepts while its sibling is stopped (briefly: the
        # supervisor kills a worker that misses its health check for 20 s).
        os.kill(sibling, signal.SIGSTOP)
        try:
            for plane in ("memory", "affect", "vmp"):
                results = _writes(server, plane, 3, first=2000)
                acked = [r for r in results if r[0] == "ok"]
                assert acked == [], (plane, len(acked))  # before the fix: all acknowledged
                assert all(500 <= r[0] < 600 for r in results), (plane, results[:2])
            _assert_not_ready(_readyz(server, Connection="close"), tmp_path)
        finally:
            os.kill(sibling, signal.SIGCONT)
        assert _workers(server) == {sibling, replacement}
        for _ in range(4):  # either worker answers the same
            _assert_not_ready(_readyz(server, Connection="close"), tmp_path)
        _kill_and_check_files(server, env)


@pytest.mark.slow
def test_planes_configured_through_symlinks_serve_with_two_workers(tmp_path: Path) -> None:
    # SQLite keeps a file's -wal/-shm beside the file a symlink names: the workers looked
    # for them beside the link, found none where the parent had recorded its own, and
    # refused every write (503) with /readyz unready, on a clean start.
    data = tmp_path / "data"
    data.mkdir()
    links = {}
    for plane in ("memory", "affect", "vmp"):
        links[plane] = tmp_path / f"{plane}-link.db"
        links[plane].symlink_to(data / f"{plane}.db")  # dangling: serve creates the file
    env = provider_env(
        tmp_path,
        RATATOSKR_MEMORY_DB=str(links["memory"]),
        RATATOSKR_AFFECT_DB=str(links["affect"]),
        RATATOSKR_VMP_DB=str(links["vmp"]),
    )
    with running(tmp_path, env, "--workers", "2") as server:
        for plane in ("memory", "affect", "vmp"):
            assert all(r[0] == "ok" for r in _writes(server, plane, 6)), plane
        for _ in range(4):  # both workers
            assert _readyz(server, Connection="close").status_code == 200
        # The guard still watches the files beside the target: a replaced -wal is refused.
        affect_wal = data / "affect.db-wal"
        affect_wal.rename(tmp_path / "elsewhere")
        affect_wal.write_bytes(b"")
        assert [r for r in _writes(server, "affect", 6, first=3000) if r[0] == "ok"] == []
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(("-wal", "-shm"))) == []
