"""ratatoskr.provider.testing: the one way tests and benchmarks start a real server."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest

from ratatoskr.provider.testing import (
    APP_READY,
    ServerDidNotStart,
    ServerProcess,
    child_env,
    free_port,
    launch,
    load_factory,
    main,
    start_app,
    start_serve,
)

from .conftest import KEY

APP = """
import sys

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route


def build(greeting: str) -> Starlette:
    async def hello(request):
        print("stderr: answered", file=sys.stderr, flush=True)
        return PlainTextResponse(greeting)

    return Starlette(routes=[Route("/", hello)])


def broken() -> Starlette:
    raise RuntimeError("the factory refused")
"""

# A parent that starts a grandchild (same process group) and then idles, announcing a URL.
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(f"child {child.pid}", flush=True)
print("ready at http://127.0.0.1:1", flush=True)
time.sleep(600)
"""


def gone(pid: int, timeout: float = 10) -> bool:
    """The process has exited (absent, or a zombie waiting for its parent)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def app_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_app.py"
    path.write_text(APP)
    return path


def test_free_port_is_bindable_on_loopback() -> None:
    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_child_env_drops_the_shells_ratatoskr_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RATATOSKR_MEMORY_DB", "/somewhere/else.db")
    monkeypatch.setenv("LAUNCHER_KEEPS_THIS", "yes")
    env = child_env({"RATATOSKR_PORT": "0"})
    assert "RATATOSKR_MEMORY_DB" not in env
    assert env["LAUNCHER_KEEPS_THIS"] == "yes"
    assert env["RATATOSKR_PORT"] == "0"


@pytest.mark.slow
def test_start_app_serves_the_factorys_app_and_captures_stderr(
    app_file: Path, tmp_path: Path
) -> None:
    with start_app(f"{app_file}:build", ["hej"], cwd=tmp_path) as server:
        assert server.base_url.startswith("http://127.0.0.1:")
        assert server.url("memory") == server.base_url + "/memory"
        assert httpx.get(server.base_url + "/", timeout=10).text == "hej"
        deadline = time.monotonic() + 10
        while "stderr: answered" not in server.log() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "stderr: answered" in server.log()
        assert any(line.startswith(APP_READY) for line in server.output)
        pid = server.pid
    assert server.proc.returncode is not None
    assert gone(pid)


@pytest.mark.slow
def test_start_app_reports_a_factory_that_fails(app_file: Path, tmp_path: Path) -> None:
    with pytest.raises(ServerDidNotStart, match="the factory refused") as info:
        start_app(f"{app_file}:broken", cwd=tmp_path)
    assert "exited" in str(info.value)


@pytest.mark.slow
def test_launch_gives_up_after_the_timeout_and_kills_the_process(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(ServerDidNotStart, match="was not ready"):
        launch(
            [
                sys.executable,
                "-c",
                "print('http://127.0.0.1:1', flush=True); import time; time.sleep(600)",
            ],
            env=child_env(),
            cwd=tmp_path,
            ready=lambda line: "never" in line,
            timeout=1,
        )
    assert time.monotonic() - started < 30


@pytest.mark.slow
def test_close_ends_the_children_a_killed_parent_left_behind(tmp_path: Path) -> None:
    server = launch(
        [sys.executable, "-c", PARENT],
        env=child_env(),
        cwd=tmp_path,
        ready=lambda line: line.startswith("ready"),
    )
    child = int(next(line for line in server.output if line.startswith("child")).split()[1])
    assert server.stop(signal.SIGKILL) == -signal.SIGKILL
    assert not gone(child, timeout=0.5), "the grandchild should outlive its parent's SIGKILL"
    server.close()
    assert gone(child)


@pytest.mark.slow
def test_stop_kills_the_group_when_the_signal_is_ignored(tmp_path: Path) -> None:
    ignores = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        "print('ready http://127.0.0.1:1', flush=True); time.sleep(600)"
    )
    server = launch(
        [sys.executable, "-c", ignores],
        env=child_env(),
        cwd=tmp_path,
        ready=lambda line: line.startswith("ready"),
    )
    assert server.stop(timeout=1) == -signal.SIGKILL


def _serve_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "RATATOSKR_MEMORY_DB": str(tmp_path / "memory.db"),
        "RATATOSKR_AFFECT_DB": str(tmp_path / "affect.db"),
        "RATATOSKR_VMP_DB": str(tmp_path / "vmp.db"),
        "RATATOSKR_MEMORY_EMBEDDING_DIM": "8",
        "RATATOSKR_HEIMDALL_KEY": KEY,
        "RATATOSKR_VMP_API_KEY": "launcher-vmp-key-0123456789",
        **extra,
    }


@pytest.mark.parametrize("level", ["info", "warning"])
@pytest.mark.slow
def test_start_serve_returns_a_serving_provider_on_a_free_port(tmp_path: Path, level: str) -> None:
    """At info uvicorn's startup line is the signal; at warning (no such line) the
    announcement is, and the listening socket holds the first request until it serves."""
    server = start_serve(["serve"], _serve_env(tmp_path, RATATOSKR_LOG_LEVEL=level), tmp_path)
    try:
        assert server.base_url.startswith("http://127.0.0.1:")
        assert not server.base_url.endswith(":8765")
        assert httpx.get(server.url("healthz"), timeout=30).status_code == 200
        assert server.stop() in (0, -signal.SIGTERM)
    finally:
        server.close()


@pytest.mark.slow
def test_start_serve_reports_a_refused_setting(tmp_path: Path) -> None:
    env = _serve_env(tmp_path, RATATOSKR_MEMORY_EMBEDDING_DIM="not-a-number")
    with pytest.raises(ServerDidNotStart, match="RATATOSKR_MEMORY_EMBEDDING_DIM"):
        start_serve(["serve"], env, tmp_path)


def test_load_factory_names_a_module_or_a_file(app_file: Path) -> None:
    assert load_factory("os.path:join") is os.path.join
    assert callable(load_factory(f"{app_file}:build"))
    with pytest.raises(ValueError, match="MODULE:NAME"):
        load_factory("no-colon-here")
    with pytest.raises(AttributeError):
        load_factory("os.path:no_such_function")


def test_main_without_a_spec_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage" in capsys.readouterr().err


def test_server_process_is_what_the_fixtures_hand_out(server: ServerProcess) -> None:
    assert isinstance(server, ServerProcess)
    assert httpx.get(server.url("healthz"), timeout=30).status_code == 200
