"""`ratatoskr --version` and the `--dev` start-up hint naming the executable it was run as."""

from __future__ import annotations

import importlib.metadata
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import bifrost
from ratatoskr.provider import cli, startup


def test_version_names_provider_and_bifrost(
    ratatoskr_cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    result = ratatoskr_cli(["--version"], {}, tmp_path)
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert line.startswith(f"ratatoskr-provider {importlib.metadata.version('ratatoskr-provider')}")
    assert f"bifrost {bifrost.__version__}" in line
    assert "wire 0.6" in line


@pytest.mark.parametrize(
    ("argv0", "shown"),
    [
        (".venv/bin/ratatoskr", ".venv/bin/ratatoskr"),
        ("{cwd}/.venv/bin/ratatoskr", ".venv/bin/ratatoskr"),
        ("{cwd}/.venv/bin/ratatoskr-memory-provider", ".venv/bin/ratatoskr"),
        ("/opt/ratatoskr/bin/ratatoskr", "/opt/ratatoskr/bin/ratatoskr"),
        ("{cwd}/ratatoskr", "./ratatoskr"),
    ],
)
def test_hint_command_is_the_path_run(
    argv0: str, shown: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [argv0.format(cwd=tmp_path), "serve"])
    assert startup.command_hint() == shown


def test_hint_bare_name_only_when_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["ratatoskr", "serve"])
    monkeypatch.setenv("PATH", str(tmp_path))
    assert startup.command_hint().endswith(" -m ratatoskr.provider")
    (tmp_path / "ratatoskr").write_text("#!/bin/sh\n")
    (tmp_path / "ratatoskr").chmod(0o755)
    assert startup.command_hint() == "ratatoskr"
    monkeypatch.setattr(sys, "argv", [str(Path(cli.__file__).with_name("__main__.py")), "serve"])
    assert startup.command_hint() == f"{sys.executable} -m ratatoskr.provider"


@pytest.mark.slow
def test_dev_hint_from_a_checkout_says_venv_bin(tmp_path: Path) -> None:
    """Started as `.venv/bin/ratatoskr serve --dev`, the hint says `.venv/bin/ratatoskr token`,
    and the command it shows mints a token from that directory."""
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    exe = Path(".venv/bin/ratatoskr")
    if not (tmp_path / exe).exists():
        pytest.skip("no ratatoskr script in this environment")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATATOSKR_")}
    proc = subprocess.Popen(
        [str(exe), "serve", "--dev", "--port", "0"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        hint = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if "mint a token:" in line:
                hint = line
                break
        assert "mint a token:  .venv/bin/ratatoskr token --dev" in hint, hint
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    (tmp_path / "body.json").write_text("{}")
    command = hint.split("mint a token:", 1)[1].split()
    minted = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert minted.returncode == 0, minted.stderr
    assert minted.stdout.count(".") == 2  # a JWT
