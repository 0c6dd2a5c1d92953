"""``ratatoskr forget`` beside a running provider over real HTTP: every chunk and
affect key of one end user is erased (another user's stay), the provider stops
returning them at once, and no byte of them is left in the plane files when the
command returns; ``--dry-run`` counts and changes nothing; a bad ``--scope`` is
refused with status 2 and nothing erased."""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

from bifrost.client import BifrostClient
from ratatoskr.provider.testing import ServerProcess

from .conftest import KEY
from .test_operate import RunCli

USER = "forget-me-user-91c3"
OTHER = "keep-me-user-22d8"
GRANT = {"tenant": "acme"}


def client(base: str, plane: str) -> BifrostClient:
    return BifrostClient(f"{base}/{plane}", KEY.encode(), actor="t", scope=GRANT, plane=plane)


def chunk(i: int, user: str) -> dict[str, Any]:
    return {
        "id": f"{user}-chunk-{i:03d}",
        "embedding": [0.1 * (i % 7) + 0.05, 0.2, -0.3, 0.4, 0.5, -0.6, 0.7, 0.8],
        "scope": {**GRANT, "end_user": user},
        "content": f"{user} said thing {i}",
    }


def seed(base: str) -> None:
    mem, aff = client(base, "memory"), client(base, "affect")
    for user in (USER, OTHER):
        mem.upsert_many([chunk(i, user) for i in range(120)], idempotency_key=f"m-{user == USER}")
        for rev in range(3):
            aff.put_many(
                [
                    {"key": f"{user}-mood-{k}", "scope": {**GRANT, "end_user": user}, "n": rev}
                    for k in range(20)
                ],
                idempotency_key=f"a-{user == USER}-{rev}",
            )
    mem.close()
    aff.close()


def leaked(tmp_path: Path, needle: bytes) -> list[str]:
    out = []
    for path in glob.glob(str(tmp_path / "*.db*")):
        if os.path.isfile(path) and needle in Path(path).read_bytes():
            out.append(os.path.basename(path))
    return out


def test_forget_beside_a_serving_provider(
    ratatoskr_cli: RunCli, server: ServerProcess, server_env: dict[str, str], tmp_path: Path
) -> None:
    seed(server.base_url)
    mem, aff = client(server.base_url, "memory"), client(server.base_url, "affect")
    assert leaked(tmp_path, USER.encode())  # the check below can fail

    dry = ratatoskr_cli(
        ["forget", "--scope", f'{{"end_user": "{USER}"}}', "--dry-run"], server_env, tmp_path
    )
    assert dry.returncode == 0, dry.stderr
    assert "memory: would erase 120 chunks" in dry.stdout
    assert "affect: would erase 20 keys" in dry.stdout
    assert len(mem.get_many([chunk(i, USER)["id"] for i in range(120)])) == 120

    bad = ratatoskr_cli(["forget", "--scope", '{"planet": "x"}'], server_env, tmp_path)
    assert bad.returncode == 2 and "--scope" in bad.stderr
    empty = ratatoskr_cli(["forget", "--scope", "{}"], server_env, tmp_path)
    assert empty.returncode == 2

    done = ratatoskr_cli(["forget", "--scope", f'{{"end_user": "{USER}"}}'], server_env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "memory: erased 120 chunks" in done.stdout
    assert "affect: erased 20 keys" in done.stdout
    assert leaked(tmp_path, USER.encode()) == []

    # The running provider returns none of them, and everything of the other user.
    assert mem.get_many([chunk(i, USER)["id"] for i in range(120)]) == []
    hits = mem.search(chunk(0, USER)["embedding"], top_k=200, scope_all=GRANT)
    assert {h["chunk"]["scope"]["end_user"] for h in hits} == {OTHER}
    assert len(hits) == 120
    assert aff.get_many([f"{USER}-mood-{k}" for k in range(20)]) == []
    assert len(aff.get_many([f"{OTHER}-mood-{k}" for k in range(20)])) == 20
    mem.close()
    aff.close()
