"""The README's examples, run as written against `ratatoskr serve --dev`: the curl
example with bash, each Python client example with the project's python."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import start_server

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# The curl example is in the README; the client examples moved to docs/clients.md.
EXAMPLE_DOCS = (README, ROOT / "docs" / "clients.md")
PYTHON_EXAMPLES = ("python-sync", "python-async", "python-vmp", "python-langchain")


def example_block(name: str = "curl", lang: str = "bash") -> str:
    text = _example_text()
    match = re.search(rf"<!-- example: {re.escape(name)} -->\s*```{lang}\n(.*?)```", text, re.S)
    assert match, f"README.md and docs/clients.md lost the {name} example block"
    return match.group(1)


def _example_text() -> str:
    return "\n".join(doc.read_text() for doc in EXAMPLE_DOCS)


def expected_output(block: str) -> list[str]:
    """The `# …` comment after each one-line `print(...)`: what the README says it prints."""
    return [m.group(1) for m in re.finditer(r"^\s*print\(.*\)  # (.*)$", block, re.M)]


def readme_env(port: str, tmp: Path) -> dict[str, str]:
    """What the README says the examples read: RATATOSKR_PORT (nothing else of ours)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATATOSKR_")}
    env.pop("PORT", None)
    return {**env, "RATATOSKR_PORT": port, "TMPDIR": str(tmp)}


def test_every_python_example_is_marked_and_runs_in_the_test() -> None:
    marked = re.findall(r"<!-- example: (python[\w-]*) -->", _example_text())
    assert tuple(marked) == PYTHON_EXAMPLES
    for name in PYTHON_EXAMPLES:
        assert len(expected_output(example_block(name, "python"))) >= 3, name


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_readme_examples_run(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (checkout / ".venv").symlink_to(Path(sys.prefix))  # the examples call .venv/bin/…
    server = start_server(["serve", "--dev", "--port", "0"], {}, checkout)
    try:
        port = server.base_url.rsplit(":", 1)[1]
        env = readme_env(port, tmp)
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", example_block()],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        upsert, search = result.stdout.strip().splitlines()
        assert upsert == '{"ok":true,"call_id":"demo-1","result":{"upserted":1,"replayed":false}}'
        assert '"chunk_id":"note-1"' in search
        assert '"recalled_view":"tea, no sugar"' in search
        assert '"embedding"' not in search
        # its request bodies went to a temporary directory, removed at the end
        assert sorted(p.name for p in checkout.iterdir()) == [".venv", "var"]
        assert list(tmp.iterdir()) == []

        for name in PYTHON_EXAMPLES:
            block = example_block(name, "python")
            ran = subprocess.run(
                [str(checkout / ".venv" / "bin" / "python"), "-"],
                input=block,
                cwd=checkout,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert ran.returncode == 0, f"{name}:\n{ran.stderr}"
            assert ran.stdout.splitlines() == expected_output(block), name
    finally:
        assert server.stop() in (0, -signal.SIGTERM)
    assert (checkout / "var" / "dev-heimdall.key").stat().st_mode & 0o077 == 0
