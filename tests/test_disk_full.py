"""One tenant fills the disk; the others keep reading, everyone can delete, and the
service comes back by itself (issue 22, finding 2).

Before the fix, on a 24 MiB filesystem, tenant X upserted until the first error; then
bystander Y's searches and gets failed (500: every call records its token's ``jti``, so
every call needs disk), X's ``delete_many`` failed, and ``/readyz`` said ready. Now the
filesystem keeps ``RATATOSKR_DISK_RESERVE_BYTES`` free for deletes and token records:
below it a write that would grow a plane's file answers ``507
bifrost.insufficient_storage`` (VMP: ``507 CAPACITY_EXCEEDED``) and ``/readyz`` says
"disk full". Over real HTTP against ``ratatoskr serve`` with one and two workers, on a
tmpfs mounted by the test (root only; CI runs as root).
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from bifrost.errors import BifrostError, InsufficientStorage, render_error
from ratatoskr.sqlite import StorageFull
from ratatoskr.sqlite.guard import free_bytes
from ratatoskr.vmp import VmpError

from .reliability.support import (
    MEMORY_DIM,
    affect_client,
    base,
    check_files,
    memory_client,
    provider_env,
    running,
    vmp_client,
)

RESERVE = 6 * 1024 * 1024
CONTENT = "x" * 1500


@contextmanager
def small_filesystem(where: Path, size_mib: int) -> Iterator[Path]:
    """A tmpfs of ``size_mib`` at ``where`` for the block, unmounted after it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root (CI runs as root)")
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0700", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr  # root that cannot mount: a broken runner
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def chunks(tenant: str, n: int, tag: str) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{tenant}-{tag}-{i}-{uuid.uuid4().hex}",
            "embedding": [float((i + d) % 7) + 1.0 for d in range(MEMORY_DIM)],
            "scope": {"tenant": tenant},
            "content": CONTENT,
        }
        for i in range(n)
    ]


def test_storage_full_is_rendered_as_507() -> None:
    status, body = render_error(
        StorageFull("database or disk is full"), plane="memory", call_id="c"
    )
    assert (status, body["error"]["code"]) == (507, "bifrost.insufficient_storage")
    assert body["error"]["message"] == "database or disk is full"


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_one_tenant_fills_the_disk_and_the_others_keep_reading(
    tmp_path: Path, workers: int
) -> None:
    with small_filesystem(tmp_path / "small", 24) as root:
        env = provider_env(root, RATATOSKR_DISK_RESERVE_BYTES=str(RESERVE))
        ballast = root / "ballast"  # freed at the end: space returning
        ballast.write_bytes(b"\0" * (4 * 1024 * 1024))
        with running(tmp_path, env, "--workers", str(workers)) as server:
            x = memory_client(base(server, "memory"), scope={"tenant": "x"})
            y = memory_client(base(server, "memory"), scope={"tenant": "y"})
            y_affect = affect_client(base(server, "affect"), scope={"tenant": "y"})
            vmp = vmp_client(base(server, "vmp"))
            mine = chunks("y", 20, "seed")
            y.upsert_many(mine)
            y_affect.put_many([{"key": "y-mood", "scope": {"tenant": "y"}, "state": "calm"}])
            # X writes until refused: a typed 507, never a 500.
            x_ids: list[str] = []
            refusal: BifrostError | None = None
            for n in range(2000):
                batch = chunks("x", 50, str(n))
                try:
                    x.upsert_many(batch)
                except BifrostError as exc:
                    refusal = exc
                    break
                x_ids += [c["id"] for c in batch]
            assert refusal is not None, "the disk never filled"
            assert isinstance(refusal, InsufficientStorage)
            assert (refusal.status, refusal.wire_code()) == (507, "bifrost.insufficient_storage")
            assert len(x_ids) > 1000
            assert free_bytes(str(root)) > 0  # the reserve is there to use
            # The bystander's reads all go on (each records its token's jti).
            for i in range(60):
                hits = y.search([1.0] * MEMORY_DIM, top_k=5)
                assert len(hits) == 5 and all(h["chunk_id"].startswith("y-") for h in hits)
                got = y.get_many([mine[i % 20]["id"]])
                assert [c["id"] for c in got] == [mine[i % 20]["id"]]
                assert y_affect.get("y-mood")["state"] == "calm"
            # Writes that add data are refused for everyone, typed; nothing is written.
            with pytest.raises(InsufficientStorage):
                y.upsert_many(chunks("y", 50, "more"))
            with pytest.raises(VmpError) as full:
                for i in range(50):
                    vmp.upsert_vector([float(i), 1.0, 2.0, 3.0], metadata={"pad": CONTENT})
            assert (full.value.status, full.value.code) == (507, "CAPACITY_EXCEEDED")
            assert len(y.get_many([c["id"] for c in mine])) == 20
            # Readiness says why, for every plane on this filesystem.
            for _ in range(2 * workers):
                ready = httpx.get(f"{server.base_url}/readyz", headers={"Connection": "close"})
                assert ready.status_code == 503
                assert set(ready.json()["failed"]) == {"memory", "affect", "vmp"}
                assert ready.json()["planes"]["memory"].startswith("disk full")
            # X can reclaim through the API.
            for start in range(0, 400, 100):
                assert x.delete_many(x_ids[start : start + 100]) == {"deleted": 100}
            assert x.get_many(x_ids[:400]) == []
            # Space returns: writes and readiness are back, with no restart.
            ballast.unlink()
            assert free_bytes(str(root)) > RESERVE
            y.upsert_many(chunks("y", 50, "after"))
            assert httpx.get(f"{server.base_url}/readyz").status_code == 200
            for client in (x, y, y_affect):
                client.close()
            vmp.close()
            log = server.log()
        assert "Traceback" not in log
        assert CONTENT not in log
        counts = check_files(env)
        assert counts["memory"] == 20 + len(x_ids) - 400 + 50
