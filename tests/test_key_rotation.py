"""Key rotation without downtime, over a real `ratatoskr serve`: during the overlap a
token signed with the old Heimdall key (and the old VMP key) is accepted beside the
new one; after it the old one is refused."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from bifrost.client import BifrostClient
from bifrost.errors import Unauthenticated

from .conftest import start_server

pytestmark = pytest.mark.slow
OLD, NEW = "old-heimdall-key-0123456789abcdef-0", "new-heimdall-key-0123456789abcdef-1"
OLD_VMP, NEW_VMP = "old-vmp-key-0123456789", "new-vmp-key-0123456789"


def _health(base: str, key: str) -> object:
    client = BifrostClient(f"{base}/memory", key.encode(), actor="a", plane="memory")
    try:
        return client.health()
    finally:
        client.close()


def _vmp_status(base: str, key: str) -> int:
    return httpx.get(f"{base}/vmp/health", headers={"Authorization": f"Bearer {key}"}).status_code


def test_old_key_accepted_during_the_overlap_and_refused_after(
    server_env: dict[str, str], tmp_path: Path
) -> None:
    overlap = {
        **server_env,
        "RATATOSKR_HEIMDALL_KEY": NEW,
        "RATATOSKR_HEIMDALL_PREVIOUS_KEY": OLD,
        "RATATOSKR_VMP_API_KEY": NEW_VMP,
        "RATATOSKR_VMP_PREVIOUS_API_KEY": OLD_VMP,
    }
    server = start_server(["serve"], overlap, tmp_path)
    try:
        for key in (OLD, NEW):
            assert _health(server.base_url, key) is not None
        assert _vmp_status(server.base_url, OLD_VMP) == 200
        assert _vmp_status(server.base_url, NEW_VMP) == 200
        assert _vmp_status(server.base_url, "another-key-0123456789") == 401
        with pytest.raises(Unauthenticated, match="signature"):
            _health(server.base_url, "a-third-key-0123456789abcdef-0123")
    finally:
        server.stop()
    after = {k: v for k, v in overlap.items() if "PREVIOUS" not in k}
    server = start_server(["serve"], after, tmp_path)
    try:
        assert _health(server.base_url, NEW) is not None
        with pytest.raises(Unauthenticated, match="signature"):
            _health(server.base_url, OLD)
        assert _vmp_status(server.base_url, OLD_VMP) == 401
        assert _vmp_status(server.base_url, NEW_VMP) == 200
    finally:
        server.stop()


def test_a_key_file_holds_the_current_key_then_previous_ones(
    server_env: dict[str, str], tmp_path: Path
) -> None:
    key_file = tmp_path / "heimdall.key"
    key_file.write_text(f"{NEW}\n{OLD}\n")
    key_file.chmod(0o600)
    env = {k: v for k, v in server_env.items() if k != "RATATOSKR_HEIMDALL_KEY"}
    server = start_server(
        ["serve"], {**env, "RATATOSKR_HEIMDALL_KEY_FILE": str(key_file)}, tmp_path
    )
    try:
        assert _health(server.base_url, NEW) is not None
        assert _health(server.base_url, OLD) is not None
    finally:
        server.stop()
