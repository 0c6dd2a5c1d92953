"""Parity: the SQLite store and bifrost's ``InMemoryAffectStore`` (the reference)
answer identical envelope sequences through ``dispatch_affect_call`` identically —
results, ``recorded_at`` stamps (same clock), error types, messages and details."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from bifrost.affect import BifrostError, dispatch_affect_call
from bifrost.consumer.testing import InMemoryAffectStore
from bifrost.context import DispatchContext
from ratatoskr.affect import open_affect_store

KEYS = ["a", "b", "c", "d", "e", "f", "key/ü", "z" * 40]
AXES = {"tenant": ["t1", "t2"], "end_user": ["u1", "u2", "u3"], "group": ["g"], "agent_self": ["s"]}
VERBS = [
    "put_many",
    "get",
    "get_many",
    "history",
    "list",
    "delete_many",
    "describe_store",
    "health",
]
GRANTS: list[dict[str, str]] = [{}, {}, {}, {"tenant": "t1"}, {"tenant": "t2", "end_user": "u1"}]


class SteppedClock:
    """Both stores read the same instant for the same envelope."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def rand_scope(rng: random.Random) -> dict[str, str]:
    return {axis: rng.choice(vals) for axis, vals in AXES.items() if rng.random() < 0.5}


def rand_filter(rng: random.Random) -> dict[str, Any]:
    args: dict[str, Any] = {}
    if rng.random() < 0.5:
        args["scope_all"] = rand_scope(rng)
    if rng.random() < 0.4:
        args["scope_any"] = [rand_scope(rng) for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.05:
        args["scope_all"] = {"planet": "p"}  # InvalidFilter
    return args


def rand_envelope(rng: random.Random, n: int) -> dict[str, Any]:
    verb = rng.choices(VERBS, weights=[10, 3, 2, 4, 5, 1, 0.2, 0.2])[0]
    env: dict[str, Any] = {"wire_version": "0.6", "call_id": f"c{n}", "verb": verb, "args": {}}
    args = env["args"]
    if verb == "put_many":
        keys = rng.sample(KEYS, rng.randint(0, 4))
        records = [{"key": k, "scope": rand_scope(rng), "v": rng.randint(0, 3)} for k in keys]
        if records and rng.random() < 0.05:
            records[0]["revision"] = 1  # reserved
        args["records"] = records
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
            args["limit"] = rng.randint(0, 6)
        if rng.random() < 0.5:
            args["before_revision"] = rng.randint(0, 8)
    elif verb == "list":
        args.update(rand_filter(rng))
        if rng.random() < 0.8:
            args["limit"] = rng.randint(0, 6)
        if rng.random() < 0.5:
            args["after_key"] = rng.choice([*KEYS, "c0", "b~"])
    return env


def outcome(store: Any, env: dict[str, Any], ctx: DispatchContext) -> Any:
    try:
        return ("ok", dispatch_affect_call(store, env, ctx))
    except BifrostError as exc:
        return ("error", type(exc).__name__, exc.message, exc.details)


@pytest.mark.parametrize("where", ["memory", "file"])
@pytest.mark.parametrize("seed", range(12))
def test_random_envelope_sequences_match_the_reference(
    tmp_path: Path, where: str, seed: int
) -> None:
    rng = random.Random(seed)
    clock = SteppedClock()
    path = ":memory:" if where == "memory" else str(tmp_path / "affect.db")
    real = open_affect_store(path, max_batch=5, max_page=5, clock=clock)
    ref = InMemoryAffectStore(max_batch=5, max_page=5, clock=clock)
    kinds: set[str] = set()
    for n in range(250):
        clock.now += rng.choice([0.001, 1.0, 600.0])  # lets ephemeral entries expire
        env = rand_envelope(rng, n)
        ctx = DispatchContext(
            actor=rng.choice(["alice", "bob"]),
            scope=dict(rng.choice(GRANTS)),
            call_id=env["call_id"],
            plane="affect",
            verb=env["verb"],
        )
        want = outcome(ref, env, ctx)
        got = outcome(real, env, ctx)
        assert got == want, (n, env)
        kinds.add(want[0] if want[0] == "ok" else want[1])
    # The final states agree too: every key's full history.
    for key in KEYS:
        assert real.history(key, limit=5) == ref.history(key, limit=5)
        page = ref.history(key, limit=5)
        while page["next_before_revision"] is not None:
            cursor = page["next_before_revision"]
            page = ref.history(key, limit=5, before_revision=cursor)
            assert real.history(key, limit=5, before_revision=cursor) == page
    assert {"ok", "InvalidArguments", "Forbidden"} <= kinds
    real.close()
