"""Hypothesis strategies for the fuzzers: envelopes for ``dispatch_memory_call`` /
``dispatch_affect_call`` and bodies for the VMP app.

Values come mostly from small pools (so ids collide, keys replay, revisions match,
grants overlap) and partly from anywhere in JSON (so every shape check is hit). The
numbers are what a JSON body can carry — finite floats (subnormals and 1e308
included), booleans and integers (up to 1e300: see ``json_scalars``) — because the
wire parser refuses the rest before dispatch; ``wild_numbers`` adds NaN and
infinities for the Python API.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from bifrost.memory.capabilities import GATED_VERB_CAPABILITY

AXES = ["tenant", "end_user", "group", "agent_self"]
VALUES = ["A", "B", "u1", "'; --", "a\x00b", "é"]
IDS = ["c0", "c1", "c2", "c3", "a\x00b", "é" * 256]
KEYS = ["k0", "k1", "k2", "k\x00", "'"]
ACTORS = ["alice", "bob"]
POOL_KEYS = [f"k{i}" for i in range(40)]  # idempotency keys: some reuse, mostly fresh
GRANTS: list[dict[str, str]] = [{}, {"tenant": "A"}, {"tenant": "B", "end_user": "u1"}]

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    # Past the double range too: orjson cannot read those, the codec must fall back.
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
wild_numbers = st.sampled_from([float("nan"), float("inf"), float("-inf")])

# Well-formed calls, so that most examples get past validation and meet the store:
# grants, replays, conflicts and revision checks.
VALID_SCOPES: list[dict[str, str]] = [
    {},
    {"tenant": "A"},
    {"tenant": "A", "end_user": "u1"},
    {"tenant": "B", "end_user": "u1"},
    {"tenant": "B", "group": "'; --"},
]
valid_scopes = st.sampled_from(VALID_SCOPES)


def valid_vector(dim: int) -> st.SearchStrategy[list[float]]:
    return st.lists(
        st.floats(min_value=-4, max_value=4, allow_nan=False), min_size=dim, max_size=dim
    ).filter(any)


valid_filter = st.fixed_dictionaries(
    {},
    optional={
        "scope_all": valid_scopes,
        "scope_any": st.lists(valid_scopes, max_size=2),
    },
)


def anything() -> st.SearchStrategy[Any]:
    return json_values


def maybe(strategy: st.SearchStrategy[Any], junk_weight: int = 1) -> st.SearchStrategy[Any]:
    """Mostly ``strategy``, sometimes any JSON value instead."""
    return st.one_of(*([strategy] * 6), *([json_values] * junk_weight))


ids = maybe(st.sampled_from(IDS) | st.text(min_size=1, max_size=8))
scope_values = maybe(st.sampled_from(VALUES) | st.text(max_size=4))
scopes = maybe(
    st.dictionaries(
        st.sampled_from(AXES) | st.sampled_from(["planet", ""]), scope_values, max_size=3
    )
)
grants = st.sampled_from(GRANTS)


def numbers(dim: int) -> st.SearchStrategy[Any]:
    element = st.one_of(
        st.floats(min_value=-4, max_value=4, allow_nan=False),
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from([0.0, -0.0, 5e-324, 1e308, -1e308, 1, 2**70, True]),
        st.integers(min_value=-(10**400), max_value=10**400),
        wild_numbers,
    )
    return st.one_of(
        st.lists(element, min_size=dim, max_size=dim),
        st.lists(element, min_size=dim, max_size=dim),
        st.lists(element, max_size=dim + 2),
        json_values,
    )


def memory_record(dim: int) -> st.SearchStrategy[Any]:
    record = st.fixed_dictionaries(
        {"scope": scopes},
        optional={
            "id": ids,
            "chunk_id": ids,
            "memory_id": ids,
            "embedding": numbers(dim),
            "vector": numbers(dim),
            "content": maybe(st.text(max_size=20)),
            "distillate": maybe(st.text(max_size=10) | st.none()),
            "origin": maybe(st.sampled_from(["injected_context", "agent", None])),
            "injection_source": maybe(st.sampled_from(["tool", None])),
            "revision": st.integers(0, 3),
            "nested": json_values,
        },
    )
    return maybe(record)


revisions = maybe(
    st.none() | st.dictionaries(st.sampled_from(IDS + KEYS), st.integers(-1, 3) | st.booleans())
)
idempotency = st.one_of(
    st.fixed_dictionaries({"idempotency_key": st.sampled_from(POOL_KEYS)}),
    st.fixed_dictionaries({"idempotency_key": st.sampled_from(POOL_KEYS)}),
    st.fixed_dictionaries(
        {},
        optional={
            "idempotency_key": maybe(st.sampled_from(["k1", "k2", "k3"]) | st.text(max_size=4)),
            "idempotency_class": maybe(st.sampled_from(["default", "ephemeral", "durable", "x"])),
        },
    ),
)


def scope_filter() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "scope_all": maybe(scopes | st.none()),
            "scope_any": maybe(st.lists(scopes, max_size=3) | st.none()),
        },
    )


def valid_memory_upsert(dim: int) -> st.SearchStrategy[dict[str, Any]]:
    record = st.fixed_dictionaries(
        {"id": st.sampled_from(IDS), "embedding": valid_vector(dim), "scope": valid_scopes},
        optional={"content": st.text(max_size=8), "distillate": st.text(max_size=5)},
    )
    return st.lists(record, max_size=4, unique_by=lambda r: str(r["id"])).flatmap(
        lambda records: st.fixed_dictionaries(
            {"records": st.just(records)},
            optional={
                "expected_revisions": st.dictionaries(
                    st.sampled_from([r["id"] for r in records] or ["c0"]), st.integers(0, 2)
                )
            },
        )
    )


def memory_args(dim: int) -> dict[str, st.SearchStrategy[dict[str, Any]]]:
    fuzzed_upsert = st.fixed_dictionaries(
        {"records": maybe(st.lists(memory_record(dim), max_size=4))},
        optional={"expected_revisions": revisions},
    )
    valid_search = st.fixed_dictionaries(
        {"vector": valid_vector(dim), "top_k": st.integers(1, 6)},
        optional={"include": st.fixed_dictionaries({"embedding": st.booleans()})},
    ).flatmap(lambda base: valid_filter.map(lambda f: {**base, **f}))
    return {
        "describe_store": st.just({}),
        "health": st.just({}),
        "upsert_many": st.one_of(valid_memory_upsert(dim), valid_memory_upsert(dim), fuzzed_upsert),
        "search": valid_search
        | st.fixed_dictionaries(
            {
                "vector": numbers(dim),
                "top_k": maybe(st.integers(0, 12) | st.sampled_from([True, 1001, 10**9, 2.0])),
            },
            optional={
                "metadata_filter": maybe(st.none() | st.just({})),
                "include": maybe(
                    st.none() | st.fixed_dictionaries({}, optional={"embedding": st.booleans()})
                ),
                "fidelity_target": json_values,
            },
        ).flatmap(lambda base: scope_filter().map(lambda f: {**base, **f})),
        "get": st.fixed_dictionaries({"chunk_id": ids}),
        "get_many": st.fixed_dictionaries({"ids": maybe(st.lists(ids, max_size=5))}),
        "delete_many": st.fixed_dictionaries({"ids": maybe(st.lists(ids, max_size=5))}),
    }


def affect_record() -> st.SearchStrategy[Any]:
    record = st.fixed_dictionaries(
        {"scope": scopes},
        optional={
            "key": maybe(st.sampled_from(KEYS) | st.text(min_size=1, max_size=6)),
            "valence": maybe(st.floats(-1, 1)),
            "labels": json_values,
            "revision": st.integers(0, 3),
            "recorded_at": st.just("2020-01-01T00:00:00Z"),
        },
    )
    return maybe(record)


keys = maybe(st.sampled_from(KEYS) | st.text(min_size=1, max_size=6))
valid_put = st.lists(
    st.fixed_dictionaries(
        {"key": st.sampled_from(KEYS), "scope": valid_scopes},
        optional={"valence": st.floats(-1, 1), "labels": st.lists(st.text(max_size=3))},
    ),
    max_size=4,
    unique_by=lambda r: str(r["key"]),
).flatmap(
    lambda records: st.fixed_dictionaries(
        {"records": st.just(records)},
        optional={
            "expected_revisions": st.dictionaries(
                st.sampled_from([r["key"] for r in records] or ["k0"]), st.integers(0, 3)
            )
        },
    )
)
affect_args: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "describe_store": st.just({}),
    "health": st.just({}),
    "put_many": valid_put
    | valid_put
    | st.fixed_dictionaries(
        {"records": maybe(st.lists(affect_record(), max_size=4))},
        optional={"expected_revisions": revisions},
    ),
    "get": st.fixed_dictionaries({"key": keys}),
    "get_many": st.fixed_dictionaries({"keys": maybe(st.lists(keys, max_size=5))}),
    "history": st.fixed_dictionaries(
        {"key": keys},
        optional={
            "limit": maybe(st.integers(0, 4) | st.sampled_from([501, True])),
            "before_revision": maybe(st.integers(0, 4) | st.none()),
        },
    ),
    "list": st.fixed_dictionaries(
        {},
        optional={
            "limit": maybe(st.integers(0, 4) | st.sampled_from([501, True])),
            "after_key": maybe(keys | st.none()),
        },
    ).flatmap(lambda base: scope_filter().map(lambda f: {**base, **f})),
    "delete_many": st.fixed_dictionaries({"keys": maybe(st.lists(keys, max_size=5))}),
}


def envelopes(
    args_by_verb: dict[str, st.SearchStrategy[dict[str, Any]]],
) -> st.SearchStrategy[dict[str, Any]]:
    """An envelope dict: a known verb with its (fuzzed) args, sometimes an unknown or
    gated verb, an extra argument name, or args that are not an object at all."""
    known = st.sampled_from(sorted(args_by_verb)).flatmap(
        lambda verb: st.tuples(st.just(verb), args_by_verb[verb])
    )
    odd = st.tuples(
        st.sampled_from(sorted(GATED_VERB_CAPABILITY)) | st.text(max_size=8),
        st.dictionaries(st.text(max_size=6), json_values, max_size=3),
    )

    def build(pair: tuple[str, Any], extra: dict[str, Any], idem: dict[str, Any]) -> dict[str, Any]:
        verb, args = pair
        if isinstance(args, dict) and extra:
            args = {**args, **extra}
        return {"wire_version": "0.6", "call_id": "fuzz", "verb": verb, "args": args, **idem}

    return st.builds(
        build,
        st.one_of(known, known, known, known, odd),
        st.one_of(
            st.just({}),
            st.just({}),
            st.just({}),
            st.dictionaries(st.sampled_from(["bogus", "ctx", "actor"]), json_values, max_size=1),
        ),
        idempotency,
    )
