"""Cross-package fixtures: a real `ratatoskr serve` subprocess on a free loopback port,
started by the one launcher that tests and benchmarks share
(:mod:`ratatoskr.provider.testing`)."""

from __future__ import annotations

import signal
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ratatoskr.provider.testing import ServerProcess, start_serve

KEY = "e2e-heimdall-key-0123456789abcdef"

# httpx builds a TLS context for every client it opens (~30 ms of CPU loading the CA
# bundle) although these clients only speak plain HTTP to 127.0.0.1: the ones made
# through these helpers share one context (each still has its own connections).
LOOPBACK_TLS = ssl.create_default_context()


def loopback_transport() -> httpx.HTTPTransport:
    """A fresh transport (its own connection pool) for a client of a loopback server."""
    return httpx.HTTPTransport(verify=LOOPBACK_TLS)


def loopback_http(**kwargs: Any) -> httpx.Client:
    """``httpx.Client(**kwargs)`` without a TLS context of its own."""
    return httpx.Client(verify=LOOPBACK_TLS, **kwargs)


def start_server(
    args: list[str], env: dict[str, str], cwd: Path, preexec_fn: Callable[[], None] | None = None
) -> ServerProcess:
    """``python -m ratatoskr.provider <args>`` (``args`` starts with ``serve``), ready to
    serve; ``preexec_fn`` runs in the child before it starts (e.g. to set limits)."""
    return start_serve(args, env, cwd, preexec_fn=preexec_fn)


def server_settings(root: Path) -> dict[str, str]:
    """The settings of the ``server`` fixture's provider, its files under ``root``."""
    return {
        "RATATOSKR_MEMORY_DB": str(root / "memory.db"),
        "RATATOSKR_AFFECT_DB": str(root / "affect.db"),
        "RATATOSKR_VMP_DB": str(root / "vmp.db"),
        "RATATOSKR_MEMORY_EMBEDDING_DIM": "8",
        "RATATOSKR_HEIMDALL_KEY": KEY,
        "RATATOSKR_VMP_API_KEY": "e2e-vmp-key-0123456789",
        "RATATOSKR_PORT": "0",
    }


@pytest.fixture
def server_env(tmp_path: Path) -> dict[str, str]:
    return server_settings(tmp_path)


@pytest.fixture
def server(server_env: dict[str, str], tmp_path: Path) -> Iterator[ServerProcess]:
    s = start_server(["serve"], server_env, tmp_path)
    yield s
    # SIGTERM (so a measured child writes its coverage), SIGKILL if it lingers; then
    # whatever is left of its process group.
    s.stop(signal.SIGTERM, timeout=10)
    s.close()
