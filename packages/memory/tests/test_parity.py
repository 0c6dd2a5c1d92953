"""Parity: identical envelope sequences through dispatch_memory_call against this store
and the reference InMemoryMemoryStore give equal results (ids, order, revisions,
shapes, error codes; scores within 1e-5) — under grants, too."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from bifrost.consumer.testing import InMemoryMemoryStore
from bifrost.consumer.testing.conformance import run_parity
from bifrost.context import DispatchContext
from ratatoskr.memory import open_memory_store

DIM = 6
TENANTS = ["t1", "t2", "t3"]
USERS = ["u1", "u2"]


def random_scope(rng: random.Random) -> dict[str, str]:
    scope = {"tenant": rng.choice(TENANTS)}
    if rng.random() < 0.6:
        scope["end_user"] = rng.choice(USERS)
    if rng.random() < 0.2:
        scope["agent_self"] = "a"
    return scope


def random_vector(rng: random.Random) -> list[float]:
    # Small integers make exact ties common, so tie order is exercised too.
    v = [float(rng.randint(-2, 2)) for _ in range(DIM)]
    return v if any(v) else [1.0, *v[1:]]


def scoped(rng: random.Random, grant: dict[str, str]) -> dict[str, str]:
    """Mostly inside the grant; now and then outside it (then 403 on both stores)."""
    scope = random_scope(rng)
    if rng.random() < 0.9:
        scope.update(grant)
    return scope


def envelope(n: int, verb: str, args: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"wire_version": "0.6", "call_id": f"c{n}", "verb": verb, "args": args, **extra}


def random_sequence(rng: random.Random, length: int, grant: dict[str, str]) -> list[dict[str, Any]]:
    ids = [f"id{i}" for i in range(25)]
    envs: list[dict[str, Any]] = []
    keys: list[str] = []
    for n in range(length):
        roll = rng.random()
        if roll < 0.35:
            batch = rng.sample(ids, rng.randint(0, 5))
            records = [
                {
                    "id": cid,
                    "embedding": random_vector(rng),
                    "scope": scoped(rng, grant),
                    "content": f"note {n}",
                    **({"distillate": f"d{n}"} if rng.random() < 0.5 else {}),
                }
                for cid in batch
            ]
            args: dict[str, Any] = {"records": records}
            if batch and rng.random() < 0.3:
                args["expected_revisions"] = {batch[0]: rng.randint(0, 2)}
            key = rng.choice(keys) if keys and rng.random() < 0.15 else f"k{n}"
            keys.append(key)
            envs.append(envelope(n, "upsert_many", args, idempotency_key=key))
        elif roll < 0.7:
            args = {"vector": random_vector(rng), "top_k": rng.randint(1, 8)}
            if rng.random() < 0.5:
                args["scope_all"] = {"tenant": rng.choice(TENANTS)}
            if rng.random() < 0.4:
                args["scope_any"] = [{"end_user": u} for u in rng.sample(USERS, rng.randint(1, 2))]
            if rng.random() < 0.2:
                args["include"] = {"embedding": False}
            if rng.random() < 0.05:
                args["scope_all"] = {"galaxy": "x"}  # invalid filter, same error on both
            envs.append(envelope(n, "search", args))
        elif roll < 0.8:
            envs.append(envelope(n, "get", {"chunk_id": rng.choice(ids)}))
        elif roll < 0.9:
            envs.append(envelope(n, "get_many", {"ids": rng.sample(ids, rng.randint(0, 6))}))
        else:
            envs.append(envelope(n, "delete_many", {"ids": rng.sample(ids, rng.randint(0, 3))}))
    return envs


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("grant", [{}, {"tenant": "t1"}, {"tenant": "t2", "end_user": "u1"}])
def test_parity_with_reference(seed: int, grant: dict[str, str], tmp_path: Path) -> None:
    rng = random.Random(seed)
    ours = open_memory_store(str(tmp_path / "p.db"), embedding_dim=DIM)
    reference = InMemoryMemoryStore(DIM)
    ctx = DispatchContext(actor="agent", scope=grant, plane="memory")
    outcomes = run_parity(ours, reference, random_sequence(rng, 150, grant), ctx)
    assert any(o["ok"] and isinstance(o["result"], list) and o["result"] for o in outcomes)
    assert any(not o["ok"] for o in outcomes)  # the sequences exercise errors too
    ours.close()
