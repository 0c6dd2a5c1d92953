"""The README's example, run as written against `ratatoskr serve --dev`."""

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

README = Path(__file__).resolve().parents[1] / "README.md"


def example_block() -> str:
    text = README.read_text()
    match = re.search(r"<!-- example: curl -->\s*```bash\n(.*?)```", text, re.S)
    assert match, "README lost its example block"
    return match.group(1)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_readme_example_runs(tmp_path: Path) -> None:
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))  # the example calls .venv/bin/ratatoskr
    server = start_server(["serve", "--dev", "--port", "0"], {}, tmp_path)
    try:
        port = server.base_url.rsplit(":", 1)[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("RATATOSKR_")}
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", example_block()],
            cwd=tmp_path,
            env={**env, "PORT": port},
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
    finally:
        assert server.stop() in (0, -signal.SIGTERM)
    assert (tmp_path / "var" / "dev-heimdall.key").stat().st_mode & 0o077 == 0
