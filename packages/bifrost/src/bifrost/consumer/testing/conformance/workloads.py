"""Random envelope workloads for parity runs: the same sequences for every backend.

A store's parity test draws a sequence from a seeded ``random.Random`` and runs
it through the transport-free dispatch against the reference store (and the
reference against itself never differs, so any difference is the store's).
The sequences mix good calls with bad ones so that errors are compared too —
both planes: invalid filters, out-of-grant scopes, stale expected revisions,
reused idempotency keys; affect also: reserved fields, unknown idempotency
classes — and they use ids, keys and scope values with the characters a backend
is most likely to mangle: NUL, U+0001, non-ASCII and long ones.

- :func:`memory_workload`: upserts (some with expected revisions, some reusing an
  idempotency key), searches (scope_all, scope_any, include), gets, deletes, for
  :func:`~bifrost.consumer.testing.conformance.parity.run_parity`.
- :func:`run_affect_parity`: an affect sequence with the clock stepping between
  calls (ephemeral ledger entries expire) and a random actor and grant per call,
  compared call by call with messages and ``recorded_at`` stamps, then every
  key's whole history.
"""

from __future__ import annotations

import random
from typing import Any

from bifrost.affect.dispatch import dispatch_affect_call
from bifrost.consumer.testing.conformance._helpers import ManualClock
from bifrost.context import DispatchContext
from bifrost.errors import BifrostError

__all__ = [
    "AFFECT_KEYS",
    "MEMORY_DIM",
    "affect_envelope",
    "memory_workload",
    "run_affect_parity",
]

MEMORY_DIM = 6
_TENANTS = ["t1", "t2", "t3"]
_USERS = ["u1", "u2"]
_ODD = "a\x00b"
# Ids with the characters a stored form may escape, and non-ASCII ones.
_IDS = [f"id{i}" for i in range(20)] + ["nul\x00id", "esc\x01id", "ü/🦊", "id\x00"]


def _memory_scope(rng: random.Random, grant: dict[str, str]) -> dict[str, str]:
    scope = {"tenant": rng.choice(_TENANTS)}
    if rng.random() < 0.6:
        scope["end_user"] = rng.choice(_USERS)
    if rng.random() < 0.2:
        scope["agent_self"] = _ODD
    if rng.random() < 0.9:
        scope.update(grant)  # now and then outside the grant: Forbidden on both
    return scope


def _vector(rng: random.Random) -> list[float]:
    # Small integers make exact ties common, so tie order is exercised too.
    v = [float(rng.randint(-2, 2)) for _ in range(MEMORY_DIM)]
    return v if any(v) else [1.0, *v[1:]]


def _envelope(n: int, verb: str, args: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"wire_version": "0.6", "call_id": f"c{n}", "verb": verb, "args": args, **extra}


def _memory_upsert(rng: random.Random, n: int, grant: dict[str, str]) -> dict[str, Any]:
    batch = rng.sample(_IDS, rng.randint(0, 5))
    records = [
        {
            "id": cid,
            # Now and then an int embedding: the JSON stored form.
            "embedding": _vector(rng) if rng.random() < 0.9 else [1, 0, 2, 0, 0, 1],
            "scope": _memory_scope(rng, grant),
            "content": f"note {n}",
            **({"distillate": f"d{n}"} if rng.random() < 0.5 else {}),
        }
        for cid in batch
    ]
    args: dict[str, Any] = {"records": records}
    if batch and rng.random() < 0.3:
        args["expected_revisions"] = {batch[0]: rng.randint(0, 2)}
    return args


def _memory_search(rng: random.Random) -> dict[str, Any]:
    args: dict[str, Any] = {"vector": _vector(rng), "top_k": rng.randint(1, 8)}
    if rng.random() < 0.5:
        args["scope_all"] = {"tenant": rng.choice(_TENANTS)}
    if rng.random() < 0.4:
        args["scope_any"] = [{"end_user": u} for u in rng.sample(_USERS, rng.randint(1, 2))]
    if rng.random() < 0.1:
        args["scope_any"] = [{"agent_self": _ODD}, {}]
    if rng.random() < 0.2:
        args["include"] = {"embedding": False}
    if rng.random() < 0.05:
        args["scope_all"] = {"galaxy": "x"}  # invalid filter, same error on both
    return args


def memory_workload(rng: random.Random, length: int, grant: dict[str, str]) -> list[dict[str, Any]]:
    """``length`` memory envelopes for stores of :data:`MEMORY_DIM` dimensions, their
    scopes mostly inside ``grant``."""
    envs: list[dict[str, Any]] = []
    keys: list[str] = []
    for n in range(length):
        roll = rng.random()
        if roll < 0.35:
            key = rng.choice(keys) if keys and rng.random() < 0.15 else f"k{n}"
            keys.append(key)
            envs.append(
                _envelope(n, "upsert_many", _memory_upsert(rng, n, grant), idempotency_key=key)
            )
        elif roll < 0.7:
            envs.append(_envelope(n, "search", _memory_search(rng)))
        elif roll < 0.8:
            envs.append(_envelope(n, "get", {"chunk_id": rng.choice(_IDS)}))
        elif roll < 0.9:
            envs.append(_envelope(n, "get_many", {"ids": rng.sample(_IDS, rng.randint(0, 6))}))
        else:
            envs.append(_envelope(n, "delete_many", {"ids": rng.sample(_IDS, rng.randint(0, 3))}))
    return envs


AFFECT_KEYS = ["a", "b", "c", "d", "key/ü", "z" * 40, "n\x00ul", "e\x01sc", "\x00", "\x01"]
_AXES = {
    "tenant": ["t1", "t2"],
    "end_user": ["u1", "u2", "u\x003"],
    "group": ["g"],
    "agent_self": ["s"],
}
_AFFECT_VERBS = ["put_many", "get", "get_many", "history", "list", "delete_many"]
_AFFECT_WEIGHTS = [10.0, 3.0, 2.0, 4.0, 5.0, 1.0]
_STATIC_VERBS = ["describe_store", "health"]
_GRANTS: list[dict[str, str]] = [{}, {}, {}, {"tenant": "t1"}, {"tenant": "t2", "end_user": "u1"}]


def _affect_scope(rng: random.Random) -> dict[str, str]:
    return {axis: rng.choice(vals) for axis, vals in _AXES.items() if rng.random() < 0.5}


def _affect_put(rng: random.Random, env: dict[str, Any]) -> None:
    keys = rng.sample(AFFECT_KEYS, rng.randint(0, 4))
    value = rng.random() if rng.random() < 0.5 else rng.randint(0, 3)
    records: list[dict[str, Any]] = [
        {"key": k, "scope": _affect_scope(rng), "v": value} for k in keys
    ]
    if records and rng.random() < 0.05:
        records[0]["revision"] = 1  # reserved: InvalidArguments
    env["args"]["records"] = records
    if keys and rng.random() < 0.3:
        env["args"]["expected_revisions"] = {k: rng.randint(0, 3) for k in rng.sample(keys, 1)}
    env["idempotency_key"] = f"i{rng.randint(0, 40)}"
    if rng.random() < 0.1:
        env["idempotency_class"] = rng.choice(["ephemeral", "durable", "bogus"])


def _affect_list(rng: random.Random, args: dict[str, Any]) -> None:
    if rng.random() < 0.5:
        args["scope_all"] = _affect_scope(rng)
    if rng.random() < 0.4:
        args["scope_any"] = [_affect_scope(rng) for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.05:
        args["scope_all"] = {"planet": "p"}  # InvalidFilter
    if rng.random() < 0.8:
        args["limit"] = rng.randint(0, 6)
    if rng.random() < 0.5:
        args["after_key"] = rng.choice([*AFFECT_KEYS, "c0", "b~", "\x00\x00"])


def affect_envelope(rng: random.Random, n: int) -> dict[str, Any]:
    """One affect envelope (every verb; now and then a bad argument)."""
    if rng.random() < 0.01:
        return _envelope(n, rng.choice(_STATIC_VERBS), {})
    verb = rng.choices(_AFFECT_VERBS, weights=_AFFECT_WEIGHTS)[0]
    env = _envelope(n, verb, {})
    args = env["args"]
    if verb == "put_many":
        _affect_put(rng, env)
    elif verb == "get":
        args["key"] = rng.choice(AFFECT_KEYS)
    elif verb in ("get_many", "delete_many"):
        args["keys"] = [rng.choice(AFFECT_KEYS) for _ in range(rng.randint(0, 5))]
    elif verb == "history":
        args["key"] = rng.choice(AFFECT_KEYS)
        if rng.random() < 0.8:
            args["limit"] = rng.randint(0, 6)
        if rng.random() < 0.5:
            args["before_revision"] = rng.randint(0, 8)
    else:
        _affect_list(rng, args)
    return env


def _affect_outcome(store: Any, env: dict[str, Any], ctx: DispatchContext) -> Any:
    try:
        return ("ok", dispatch_affect_call(store, env, ctx))
    except BifrostError as exc:
        return ("error", type(exc).__name__, exc.message, exc.details)


def run_affect_parity(
    store: Any, reference: Any, rng: random.Random, clock: ManualClock, *, steps: int = 250
) -> set[str]:
    """Drive ``store`` and ``reference`` (both built with ``clock`` and ``max_page=5``)
    through ``steps`` random envelopes, asserting equal outcomes — results with their
    ``recorded_at`` stamps, error types, messages and details — then equal histories
    of every key, page by page. Returns the outcome kinds seen ("ok" or error names)."""
    kinds: set[str] = set()
    for n in range(steps):
        clock.advance(rng.choice([0.001, 1.0, 600.0]))  # lets ephemeral entries expire
        env = affect_envelope(rng, n)
        ctx = DispatchContext(
            actor=rng.choice(["alice", "bob"]),
            scope=dict(rng.choice(_GRANTS)),
            call_id=env["call_id"],
            plane="affect",
            verb=env["verb"],
        )
        want = _affect_outcome(reference, env, ctx)
        got = _affect_outcome(store, env, ctx)
        assert got == want, (n, env["verb"], got, want)
        kinds.add(want[0] if want[0] == "ok" else want[1])
    for key in AFFECT_KEYS:
        page = reference.history(key, limit=5)
        assert store.history(key, limit=5) == page, key
        while page["next_before_revision"] is not None:
            cursor = page["next_before_revision"]
            page = reference.history(key, limit=5, before_revision=cursor)
            assert store.history(key, limit=5, before_revision=cursor) == page, key
    return kinds
