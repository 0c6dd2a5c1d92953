"""The bundled default loads and embeds with the network cut off and no cache to read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PROGRAM = textwrap.dedent(
    """
    import json, os, socket, sys
    attempts = sys.argv[1]

    def refuse(*args, **kwargs):
        with open(attempts, "a") as fh:
            fh.write("network\\n")
        raise OSError("network is cut off")

    socket.socket.connect = refuse
    socket.socket.connect_ex = refuse
    socket.create_connection = refuse
    socket.getaddrinfo = refuse

    from ratatoskr.embed import EmbedderSettings, build_embedder
    embedder = build_embedder(EmbedderSettings())
    vectors = embedder.embed_documents(["a passage", "another"])
    query = embedder.embed_query("a question")
    print(json.dumps({"name": embedder.name, "dim": embedder.dim,
                      "n": len(vectors), "q": len(query)}))
    """
)


@pytest.mark.slow
def test_bundled_embedder_runs_with_no_network_and_an_empty_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    attempts = tmp_path / "attempts"
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("RATATOSKR_", "HF_", "XDG_"))
    }
    env.update(
        HOME=str(home),
        XDG_CACHE_HOME=str(home / ".cache"),
        HF_HOME=str(home / "hf"),
        HF_HUB_OFFLINE="1",
        RATATOSKR_EMBEDDER="bundled",
    )
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(attempts)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "name": "bundled:multilingual-e5-small-q4",
        "dim": 384,
        "n": 2,
        "q": 384,
    }
    assert not attempts.exists()  # nothing even tried the network
    assert list(home.rglob("*")) == []  # no model was fetched into a cache
