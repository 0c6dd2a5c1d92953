"""Fixtures: settings on temporary files, a Heimdall key, clients per plane."""

from __future__ import annotations

from pathlib import Path

import pytest

from ratatoskr.provider.settings import Settings

KEY = "provider-test-key-0123456789abcdef"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        memory_db=str(tmp_path / "memory.db"),
        affect_db=str(tmp_path / "affect.db"),
        vmp_db=str(tmp_path / "vmp.db"),
        memory_embedding_dim=8,
        heimdall_key=KEY,
        vmp_api_key="vmp-test-key-0123456789",
        # Starlette's TestClient sends `Host: testserver`.
        allowed_hosts="testserver",
    )
