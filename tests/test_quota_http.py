"""Per-tenant quotas over real HTTP (issue 22, finding 2: "there is no quota").

``ratatoskr serve`` with tiny quotas (3 memory chunks, 2 affect keys, 2 KB of
affect history per tenant): tenant A's write past its quota is refused with the
typed 413 ``<plane>.quota_exceeded`` naming the setting and never the tenant, and
nothing of it is written (its chunks and keys read back unchanged, and the same
call succeeds after a delete made room); bystander tenant B writes and reads
throughout. Before quotas, A's writes were acknowledged until the disk was full.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bifrost.client import BifrostClient
from bifrost.errors import BifrostError
from ratatoskr.provider.testing import ServerProcess

from .conftest import KEY, start_server

DIM = 8


@pytest.fixture
def quota_server(server_env: dict[str, str], tmp_path: Path) -> Iterator[ServerProcess]:
    env = {
        **server_env,
        "RATATOSKR_MEMORY_QUOTA_CHUNKS": "3",
        "RATATOSKR_AFFECT_QUOTA_KEYS": "2",
        "RATATOSKR_AFFECT_QUOTA_BYTES": "2048",
    }
    server = start_server(["serve"], env, tmp_path)
    yield server
    server.stop()
    server.close()


def _client(base: str, plane: str, tenant: str) -> BifrostClient:
    return BifrostClient(
        f"{base}/{plane}",
        KEY.encode(),
        actor=f"agent-{tenant}",
        scope={"tenant": tenant},
        plane=plane,
    )


def _chunk(cid: str, tenant: str) -> dict[str, Any]:
    return {"id": cid, "embedding": [1.0] * DIM, "scope": {"tenant": tenant}, "content": cid}


def _refused(call: Any, code: str, setting: str) -> BifrostError:
    with pytest.raises(BifrostError) as exc:
        call()
    err = exc.value
    assert (err.status, err.wire_code()) == (413, code)
    assert setting in err.message and "secret-tenant" not in err.message
    return err


def test_a_tenant_past_its_quota_gets_413_and_a_bystander_writes_on(
    quota_server: ServerProcess,
) -> None:
    base = quota_server.base_url
    a = _client(base, "memory", "secret-tenant-a")
    b = _client(base, "memory", "secret-tenant-b")
    a.call(
        "upsert_many",
        {"records": [_chunk(f"a{i}", "secret-tenant-a") for i in range(3)]},
        idempotency_key="a-1",
    )
    over = {"records": [_chunk("a3", "secret-tenant-a")]}
    err = _refused(
        lambda: a.call("upsert_many", over, idempotency_key="a-2"),
        "memory.quota_exceeded",
        "RATATOSKR_MEMORY_QUOTA_CHUNKS 3",
    )
    assert "4 chunks" in err.message
    assert a.call("get_many", {"ids": ["a0", "a1", "a2", "a3"]}) is not None
    assert [r["id"] for r in a.call("get_many", {"ids": ["a0", "a1", "a2", "a3"]})] == [
        "a0",
        "a1",
        "a2",
    ]
    # The bystander is not held to A's usage.
    b.call(
        "upsert_many",
        {"records": [_chunk(f"b{i}", "secret-tenant-b") for i in range(3)]},
        idempotency_key="b-1",
    )
    assert len(b.call("search", {"vector": [1.0] * DIM, "top_k": 10})) == 3
    # A delete makes room: the refused call, retried, is performed (not replayed).
    assert a.call("delete_many", {"ids": ["a0"]})["deleted"] == 1
    assert a.call("upsert_many", over, idempotency_key="a-2") == {"upserted": 1, "replayed": False}

    fa = _client(base, "affect", "secret-tenant-a")
    fb = _client(base, "affect", "secret-tenant-b")
    rec = {"key": "k1", "scope": {"tenant": "secret-tenant-a"}, "mood": "x" * 700}
    fa.call("put_many", {"records": [rec]}, idempotency_key=str(uuid.uuid4()))
    fa.call("put_many", {"records": [rec]}, idempotency_key=str(uuid.uuid4()))
    # A third revision takes the key's history past 2048 bytes.
    _refused(
        lambda: fa.call("put_many", {"records": [rec]}, idempotency_key="f-3"),
        "affect.quota_exceeded",
        "RATATOSKR_AFFECT_QUOTA_BYTES 2048",
    )
    assert fa.call("get", {"key": "k1"})["revision"] == 2
    two = [{"key": k, "scope": {"tenant": "secret-tenant-a"}, "v": 1} for k in ("k2", "k3")]
    _refused(
        lambda: fa.call("put_many", {"records": two}, idempotency_key="f-4"),
        "affect.quota_exceeded",
        "RATATOSKR_AFFECT_QUOTA_KEYS 2",
    )
    assert fa.call("get", {"key": "k2"}) is None
    bb = [{"key": k, "scope": {"tenant": "secret-tenant-b"}, "v": 1} for k in ("k4", "k5")]
    assert fb.call("put_many", {"records": bb}, idempotency_key="fb-1")["written"] == 2
