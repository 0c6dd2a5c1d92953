"""Property: for random stores, scopes and queries, search equals a brute-force oracle."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bifrost.context import DispatchContext
from bifrost.scope import SCOPE_LATTICE
from ratatoskr.memory import open_memory_store

DIM = 4
CTX = DispatchContext(actor="prop")

values = st.sampled_from(["a", "b", "c"])
scopes = st.dictionaries(st.sampled_from(SCOPE_LATTICE), values, max_size=3)
vectors = st.lists(st.integers(-3, 3), min_size=DIM, max_size=DIM).filter(any)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("upsert"), st.integers(0, 30), vectors, scopes),
        st.tuples(st.just("delete"), st.integers(0, 30)),
    ),
    min_size=1,
    max_size=60,
)
queries = st.tuples(
    vectors,
    st.integers(1, 12),
    scopes,
    st.lists(scopes, max_size=3),
)


def oracle_matches(
    scope: dict[str, str], s_all: dict[str, str], s_any: list[dict[str, str]]
) -> bool:
    if any(scope.get(k) != v for k, v in s_all.items()):
        return False
    return not s_any or any(all(scope.get(k) == v for k, v in m.items()) for m in s_any)


def cosine(a: list[int], b: list[int]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops, query_list=st.lists(queries, min_size=1, max_size=4))
@pytest.mark.slow
def test_search_equals_brute_force(ops: list[tuple[Any, ...]], query_list: list[Any]) -> None:
    store = open_memory_store(":memory:", embedding_dim=DIM)
    model: dict[str, tuple[list[int], dict[str, str]]] = {}
    for n, op in enumerate(ops):
        if op[0] == "upsert":
            _, i, v, scope = op
            rec = {"id": f"c{i}", "embedding": v, "scope": scope}
            store.upsert_many([rec], idempotency_key=f"k{n}", ctx=CTX)
            model[f"c{i}"] = (v, scope)
        else:
            store.delete_many([f"c{op[1]}"])
            model.pop(f"c{op[1]}", None)
    for v, k, s_all, s_any in query_list:
        got = store.search([float(x) for x in v], top_k=k, scope_all=s_all, scope_any=s_any)
        expected = sorted(
            (
                (-cosine(v, vec), cid)
                for cid, (vec, scope) in model.items()
                if oracle_matches(scope, s_all, s_any)
            ),
        )[:k]
        assert len(got) == len(expected)  # never fewer than min(top_k, in-scope count)
        for row, (neg, cid) in zip(got, expected, strict=True):
            assert math.isclose(row["score"], -neg, abs_tol=1e-9)
            if row["chunk_id"] != cid:  # only a float-level tie may swap
                assert math.isclose(cosine(v, model[row["chunk_id"]][0]), -neg, abs_tol=1e-12)
            assert oracle_matches(row["chunk"]["scope"], s_all, s_any)
    store.close()
