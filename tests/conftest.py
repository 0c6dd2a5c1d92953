"""Cross-package fixtures: a real `ratatoskr serve` subprocess on a free loopback port."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

KEY = "e2e-heimdall-key-0123456789abcdef"


@dataclass
class Server:
    proc: subprocess.Popen[str]
    base_url: str
    output: list[str] = field(default_factory=list)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)


def start_server(
    args: list[str], env: dict[str, str], cwd: Path, preexec_fn: Callable[[], None] | None = None
) -> Server:
    """Start `python -m ratatoskr.provider <args>` and wait until it listens
    (``preexec_fn`` runs in the child before it starts, e.g. to set limits)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("RATATOSKR_")}
    full.update(env)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ratatoskr.provider", *args],
        env=full,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=preexec_fn,  # noqa: PLW1509 - only resource limits, no threads involved
    )
    assert proc.stdout is not None
    lines: list[str] = []
    found = threading.Event()
    url: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            match = re.search(r"http://127\.0\.0\.1:\d+", line)
            if match and not url:
                url.append(match.group(0))
            if "Application startup complete" in line:
                found.set()

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + 60
    while not found.is_set() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    if not found.is_set():
        proc.kill()
        raise AssertionError("server did not start:\n" + "".join(lines))
    return Server(proc, url[0], lines)


@pytest.fixture
def server_env(tmp_path: Path) -> dict[str, str]:
    return {
        "RATATOSKR_MEMORY_DB": str(tmp_path / "memory.db"),
        "RATATOSKR_AFFECT_DB": str(tmp_path / "affect.db"),
        "RATATOSKR_VMP_DB": str(tmp_path / "vmp.db"),
        "RATATOSKR_MEMORY_EMBEDDING_DIM": "8",
        "RATATOSKR_HEIMDALL_KEY": KEY,
        "RATATOSKR_VMP_API_KEY": "e2e-vmp-key-0123456789",
        "RATATOSKR_PORT": "0",
    }


@pytest.fixture
def server(server_env: dict[str, str], tmp_path: Path) -> Iterator[Server]:
    s = start_server(["serve"], server_env, tmp_path)
    yield s
    if s.proc.poll() is None:
        s.stop(signal.SIGKILL)
