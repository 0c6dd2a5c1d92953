"""`ratatoskr serve --workers N`: a worker that dies is reported and replaced; workers
whose server process is gone stop instead of serving on unsupervised."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil  # type: ignore[import-untyped]  # no stubs in the dev group
import pytest

from .conftest import loopback_http, start_server

pytestmark = pytest.mark.slow


def _workers(pid: int, n: int, timeout: float = 30) -> list[psutil.Process]:
    parent = psutil.Process(pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [p for p in parent.children() if _is_worker(p)]
        if len(found) == n:
            return found
        time.sleep(0.1)
    raise AssertionError(f"expected {n} workers")


def _is_worker(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE and "spawn_main" in " ".join(proc.cmdline())
    except psutil.Error:  # gone, or a zombie not yet reaped
        return False


def _gone(procs: list[psutil.Process], timeout: float) -> bool:
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return not alive


def test_a_dead_worker_is_reported_and_replaced(server_env: dict[str, str], tmp_path: Path) -> None:
    server = start_server(["serve", "--workers", "2"], server_env, tmp_path)
    try:
        victim, survivor = _workers(server.proc.pid, 2)
        os.kill(victim.pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            # A replacement is spawned (and imports the app) in seconds on a loaded host.
            now = {p.pid for p in _workers(server.proc.pid, 2, timeout=60)}
            if victim.pid not in now and survivor.pid in now:
                break
            time.sleep(0.2)
        log = "".join(server.output)
        assert f"worker pid={victim.pid} died (signal SIGKILL); starting a replacement" in log
        for _ in range(10):  # a new connection each
            with loopback_http() as client:
                assert client.get(f"{server.base_url}/healthz").status_code == 200
        assert server.stop() == 0
    finally:
        if server.proc.poll() is None:
            server.stop(signal.SIGKILL)


def test_workers_stop_when_the_server_process_is_killed(
    server_env: dict[str, str], tmp_path: Path
) -> None:
    server = start_server(["serve", "--workers", "2"], server_env, tmp_path)
    workers = _workers(server.proc.pid, 2)
    server.stop(signal.SIGKILL)
    assert _gone(workers, timeout=20), "orphaned workers kept serving"
