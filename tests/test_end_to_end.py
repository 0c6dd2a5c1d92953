"""End to end over a real socket: `ratatoskr serve` as a subprocess, every memory and
affect verb through bifrost.client, SIGTERM, then the files hold everything acknowledged."""

from __future__ import annotations

import signal
from typing import Any

import httpx
import pytest

from bifrost.client import BifrostClient
from bifrost.errors import Forbidden, IdempotencyConflict, RevisionMismatch
from ratatoskr.affect import open_affect_store
from ratatoskr.memory import open_memory_store
from ratatoskr.memory.testing import chunk, one_hot
from ratatoskr.provider.testing import ServerProcess
from ratatoskr.vmp import open_vmp_store

from .conftest import KEY


def emb(i: int) -> list[float]:
    return one_hot(i, rest=0.1)


@pytest.mark.slow
def test_every_verb_over_a_real_socket_then_sigterm(
    server: ServerProcess, server_env: dict[str, str]
) -> None:
    grant = {"tenant": "acme"}
    memory = BifrostClient(
        f"{server.base_url}/memory", KEY.encode(), actor="agent", scope=grant, plane="memory"
    )
    affect = BifrostClient(
        f"{server.base_url}/affect", KEY.encode(), actor="agent", scope=grant, plane="affect"
    )

    assert httpx.get(f"{server.base_url}/healthz").json() == {"status": "ok"}
    assert memory.handshake()["plane"] == "memory"
    assert memory.describe_store()["optimistic_locking_supported"] is True
    assert memory.health()["embedding_dim"] == 8
    records = [
        chunk(f"c{i}", emb(i), {"tenant": "acme", "end_user": f"u{i % 2}"}, content=f"n{i}")
        for i in range(20)
    ]
    assert memory.upsert_many(records, idempotency_key="m1") == {"upserted": 20, "replayed": False}
    assert memory.upsert_many(records, idempotency_key="m1")["replayed"] is True
    with pytest.raises(IdempotencyConflict):
        memory.upsert_many(records[:1], idempotency_key="m1")
    with pytest.raises(RevisionMismatch):
        memory.upsert_many(records[:1], idempotency_key="m2", expected_revisions={"c0": 0})
    with pytest.raises(Forbidden):
        memory.upsert_many(
            [{**records[0], "id": "x", "scope": {"tenant": "other"}}], idempotency_key="m3"
        )
    hits = memory.search(emb(3), top_k=3, scope_all={"end_user": "u1"})
    assert [h["chunk_id"] for h in hits] == ["c11", "c19", "c3"]  # equal vectors: ties by chunk_id
    assert all(h["chunk"]["scope"]["end_user"] == "u1" for h in hits)
    assert memory.get("c5")["revision"] == 1
    assert [r["id"] for r in memory.get_many(["c2", "nope", "c1"])] == ["c2", "c1"]
    assert memory.delete_many(["c19", "nope"]) == {"deleted": 1}

    assert affect.handshake()["plane"] == "affect"
    assert affect.describe_store()["history_supported"] is True
    assert affect.health()["plane"] == "affect"
    for n in range(3):
        affect.put_many(
            [{"key": "k1", "scope": grant, "mood": n}, {"key": f"k{n + 2}", "scope": grant}],
            idempotency_key=f"a{n}",
        )
    current: Any = affect.get("k1")
    assert current["revision"] == 3
    assert current["mood"] == 2
    assert [r["key"] for r in affect.get_many(["k2", "k1"])] == ["k2", "k1"]
    page = affect.history("k1", limit=2)
    assert [i["revision"] for i in page["items"]] == [3, 2]
    rest = affect.history("k1", limit=2, before_revision=page["next_before_revision"])
    assert [i["revision"] for i in rest["items"]] == [1]
    listing = affect.list(limit=10)
    assert [i["key"] for i in listing["items"]] == ["k1", "k2", "k3", "k4"]
    assert affect.delete_many(["k4"]) == {"deleted": 1}

    # uvicorn finishes in-flight calls and the lifespan, then re-raises SIGTERM.
    assert server.stop() in (0, -signal.SIGTERM)
    assert any("Application shutdown complete" in line for line in server.output)

    m = open_memory_store(server_env["RATATOSKR_MEMORY_DB"], embedding_dim=8)
    assert m.count() == 19
    assert m.get("c0") == {**records[0], "revision": 1}
    m.close()
    a = open_affect_store(server_env["RATATOSKR_AFFECT_DB"])
    assert a.get("k1")["revision"] == 3  # type: ignore[index]
    assert a.get("k4") is None
    a.close()
    open_vmp_store(server_env["RATATOSKR_VMP_DB"], dim=16).close()
