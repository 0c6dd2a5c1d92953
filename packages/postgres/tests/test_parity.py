"""Parity: random envelope sequences through bifrost's dispatch give the PostgreSQL stores
and the reference stores identical outcomes (results, order, revisions, error codes and
details; scores within 1e-5), under grants too. And the PostgreSQL memory store scores
bit for bit like the SQLite store (the same stored form and float64 re-rank)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from bifrost.affect import BifrostError, dispatch_affect_call
from bifrost.consumer.testing import InMemoryAffectStore, InMemoryMemoryStore
from bifrost.consumer.testing.conformance import run_parity
from bifrost.context import DispatchContext
from ratatoskr.affect.postgres import open_postgres_affect_store
from ratatoskr.memory import open_memory_store
from ratatoskr.memory.postgres import open_postgres_memory_store
from ratatoskr.postgres import Pool

DIM = 6
TENANTS = ["t1", "t2", "t3"]
USERS = ["u1", "u2"]
# Ids and keys with the characters the stored form escapes, and non-ASCII ones.
IDS = [f"id{i}" for i in range(20)] + ["nul\x00id", "esc\x01id", "ü/🦊", "id\x00"]


def _scope(rng: random.Random, grant: dict[str, str]) -> dict[str, str]:
    scope = {"tenant": rng.choice(TENANTS)}
    if rng.random() < 0.6:
        scope["end_user"] = rng.choice(USERS)
    if rng.random() < 0.2:
        scope["agent_self"] = "a\x00b"
    if rng.random() < 0.9:
        scope.update(grant)  # now and then outside the grant: 403 on both
    return scope


def _vector(rng: random.Random) -> list[float]:
    # Small integers make exact ties common, so tie order is exercised too.
    v = [float(rng.randint(-2, 2)) for _ in range(DIM)]
    return v if any(v) else [1.0, *v[1:]]


def _env(n: int, verb: str, args: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"wire_version": "0.6", "call_id": f"c{n}", "verb": verb, "args": args, **extra}


def memory_sequence(rng: random.Random, length: int, grant: dict[str, str]) -> list[dict[str, Any]]:
    envs: list[dict[str, Any]] = []
    keys: list[str] = []
    for n in range(length):
        roll = rng.random()
        if roll < 0.35:
            batch = rng.sample(IDS, rng.randint(0, 5))
            records = [
                {
                    "id": cid,
                    # Now and then an int embedding: the JSON stored form.
                    "embedding": _vector(rng) if rng.random() < 0.9 else [1, 0, 2, 0, 0, 1],
                    "scope": _scope(rng, grant),
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
            envs.append(_env(n, "upsert_many", args, idempotency_key=key))
        elif roll < 0.7:
            args = {"vector": _vector(rng), "top_k": rng.randint(1, 8)}
            if rng.random() < 0.5:
                args["scope_all"] = {"tenant": rng.choice(TENANTS)}
            if rng.random() < 0.4:
                args["scope_any"] = [{"end_user": u} for u in rng.sample(USERS, rng.randint(1, 2))]
            if rng.random() < 0.1:
                args["scope_any"] = [{"agent_self": "a\x00b"}, {}]
            if rng.random() < 0.2:
                args["include"] = {"embedding": False}
            if rng.random() < 0.05:
                args["scope_all"] = {"galaxy": "x"}  # invalid filter, same error on both
            envs.append(_env(n, "search", args))
        elif roll < 0.8:
            envs.append(_env(n, "get", {"chunk_id": rng.choice(IDS)}))
        elif roll < 0.9:
            envs.append(_env(n, "get_many", {"ids": rng.sample(IDS, rng.randint(0, 6))}))
        else:
            envs.append(_env(n, "delete_many", {"ids": rng.sample(IDS, rng.randint(0, 3))}))
    return envs


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("grant", [{}, {"tenant": "t1"}, {"tenant": "t2", "end_user": "u1"}])
def test_memory_parity_with_reference(
    seed: int, grant: dict[str, str], pg_pool: Pool, schema: str
) -> None:
    rng = random.Random(seed)
    ours = open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=DIM)
    reference = InMemoryMemoryStore(DIM)
    ctx = DispatchContext(actor="agent", scope=grant, plane="memory")
    outcomes = run_parity(ours, reference, memory_sequence(rng, 150, grant), ctx)
    assert any(o["ok"] and isinstance(o["result"], list) and o["result"] for o in outcomes)
    assert any(not o["ok"] for o in outcomes)  # the sequences exercise errors too


class SteppedClock:
    """Both stores read the same instant for the same envelope."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


KEYS = ["a", "b", "c", "d", "key/ü", "z" * 40, "n\x00ul", "e\x01sc", "\x00", "\x01"]
AXES = {"tenant": ["t1", "t2"], "end_user": ["u1", "u2", "u\x003"], "group": ["g"]}
VERBS = ["put_many", "get", "get_many", "history", "list", "delete_many"]
GRANTS: list[dict[str, str]] = [{}, {}, {}, {"tenant": "t1"}, {"tenant": "t2", "end_user": "u1"}]


def _rand_scope(rng: random.Random) -> dict[str, str]:
    return {axis: rng.choice(vals) for axis, vals in AXES.items() if rng.random() < 0.5}


def affect_envelope(rng: random.Random, n: int) -> dict[str, Any]:
    verb = rng.choices(VERBS, weights=[10, 3, 2, 4, 5, 1])[0]
    env: dict[str, Any] = {"wire_version": "0.6", "call_id": f"c{n}", "verb": verb, "args": {}}
    args = env["args"]
    if verb == "put_many":
        keys = rng.sample(KEYS, rng.randint(0, 4))
        args["records"] = [{"key": k, "scope": _rand_scope(rng), "v": rng.random()} for k in keys]
        if keys and rng.random() < 0.3:
            args["expected_revisions"] = {k: rng.randint(0, 3) for k in rng.sample(keys, 1)}
        env["idempotency_key"] = f"i{rng.randint(0, 40)}"
        if rng.random() < 0.1:
            env["idempotency_class"] = rng.choice(["ephemeral", "durable", "bogus"])
    elif verb == "get":
        args["key"] = rng.choice(KEYS)
    elif verb in ("get_many", "delete_many"):
        args["keys"] = [rng.choice(KEYS) for _ in range(rng.randint(0, 5))]
    elif verb == "history":
        args["key"] = rng.choice(KEYS)
        if rng.random() < 0.8:
            args["limit"] = rng.randint(1, 6)
        if rng.random() < 0.5:
            args["before_revision"] = rng.randint(1, 8)
    else:  # list
        if rng.random() < 0.5:
            args["scope_all"] = _rand_scope(rng)
        if rng.random() < 0.4:
            args["scope_any"] = [_rand_scope(rng) for _ in range(rng.randint(0, 3))]
        if rng.random() < 0.8:
            args["limit"] = rng.randint(1, 6)
        if rng.random() < 0.5:
            args["after_key"] = rng.choice([*KEYS, "c0", "b~", "\x00\x00"])
    return env


def _outcome(store: Any, env: dict[str, Any], ctx: DispatchContext) -> Any:
    try:
        return ("ok", dispatch_affect_call(store, env, ctx))
    except BifrostError as exc:
        return ("error", type(exc).__name__, exc.message, exc.details)


@pytest.mark.parametrize("seed", range(6))
def test_affect_parity_with_reference(seed: int, pg_pool: Pool, schema: str) -> None:
    rng = random.Random(seed)
    clock = SteppedClock()
    real = open_postgres_affect_store(pg_pool, schema=schema, max_batch=5, max_page=5, clock=clock)
    ref = InMemoryAffectStore(max_batch=5, max_page=5, clock=clock)
    kinds: set[str] = set()
    for n in range(250):
        clock.now += rng.choice([0.001, 1.0, 600.0])  # lets ephemeral entries expire
        env = affect_envelope(rng, n)
        ctx = DispatchContext(
            actor=rng.choice(["alice", "bob"]),
            scope=dict(rng.choice(GRANTS)),
            call_id=env["call_id"],
            plane="affect",
            verb=env["verb"],
        )
        want = _outcome(ref, env, ctx)
        assert _outcome(real, env, ctx) == want, (n, env)  # recorded_at stamps included
        kinds.add(want[0] if want[0] == "ok" else want[1])
    for key in KEYS:  # the final states agree: every key's whole history
        page = ref.history(key, limit=5)
        assert real.history(key, limit=5) == page
        while page["next_before_revision"] is not None:
            cursor = page["next_before_revision"]
            page = ref.history(key, limit=5, before_revision=cursor)
            assert real.history(key, limit=5, before_revision=cursor) == page
    assert {"ok", "Forbidden"} <= kinds


def test_memory_scores_equal_the_sqlite_store(pg_pool: Pool, schema: str, tmp_path: Path) -> None:
    """384 dimensions, 600 chunks in 12 tenants, near-duplicates included: the same ids,
    order, revisions and bit-equal scores from both backends, in every filter mode."""
    dim = 384
    rng = random.Random(7)
    pg = open_postgres_memory_store(pg_pool, schema=schema, embedding_dim=dim)
    lite = open_memory_store(str(tmp_path / "m.db"), embedding_dim=dim)
    ctx = DispatchContext(actor="a", plane="memory")
    base = [[rng.gauss(0, 1) for _ in range(dim)] for _ in range(40)]
    recs = []
    for i in range(600):
        centre = base[i % 40]
        vec = [x + rng.gauss(0, 0.05 if i % 3 else 1e-9) for x in centre]
        scope = {"tenant": f"t{i % 12}"}
        if i % 5 == 0:
            scope["end_user"] = f"u{i % 7}"
        recs.append({"id": f"c{i:04}", "embedding": vec, "scope": scope, "content": str(i)})
    for start in range(0, 600, 100):
        for s in (pg, lite):
            s.upsert_many(recs[start : start + 100], idempotency_key=f"k{start}", ctx=ctx)
    filters: list[dict[str, Any]] = [
        {},
        {"scope_all": {"tenant": "t3"}},
        {"scope_any": [{"end_user": "u1"}, {"tenant": "t5"}]},
        {"scope_all": {"tenant": "t0"}, "scope_any": [{"end_user": "u0"}, {"end_user": "u5"}]},
    ]
    for q in range(8):
        probe = [x + rng.gauss(0, 0.01) for x in base[q]]
        for f in filters:
            for top_k in (1, 10, 60):
                a = pg.search(probe, top_k=top_k, **f)
                b = lite.search(probe, top_k=top_k, **f)
                assert [(r["chunk_id"], r["score"], r["revision"]) for r in a] == [
                    (r["chunk_id"], r["score"], r["revision"]) for r in b
                ]
                assert a == b
    lite.close()
