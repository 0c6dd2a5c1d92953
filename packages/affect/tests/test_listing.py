"""``list`` planning: the scope filter as a union of conjunctions, and paging at a
scale where the driving-axis choice matters, checked against brute force."""

from __future__ import annotations

import random
from typing import Any

import pytest

from bifrost.context import DispatchContext
from bifrost.scope import matches_scope
from ratatoskr.affect import RatatoskrAffectStore, open_affect_store
from ratatoskr.affect.listing import conjunctions

CTX = DispatchContext(actor="lister", plane="affect")


@pytest.mark.parametrize(
    ("scope_all", "scope_any", "want"),
    [
        ({}, [], [{}]),
        ({"tenant": "t"}, [], [{"tenant": "t"}]),
        ({}, [{}], [{}]),
        ({"tenant": "t"}, [{"end_user": "u"}, {}], [{"tenant": "t"}]),
        ({"tenant": "t"}, [{"tenant": "t"}], [{"tenant": "t"}]),
        ({"tenant": "t"}, [{"tenant": "x"}], []),
        (
            {"tenant": "t"},
            [{"end_user": "u"}, {"tenant": "x"}, {"end_user": "u"}, {"group": "g"}],
            [{"tenant": "t", "end_user": "u"}, {"tenant": "t", "group": "g"}],
        ),
    ],
)
def test_conjunctions(
    scope_all: dict[str, str], scope_any: list[dict[str, str]], want: list[dict[str, str]]
) -> None:
    assert conjunctions(scope_all, scope_any) == want


@pytest.fixture(scope="module")
def big() -> Any:
    """3000 keys with skewed scopes: one tenant holds most keys (beyond the
    selectivity probe), end users and groups cut across tenants."""
    rng = random.Random(5)
    s = open_affect_store(":memory:")
    scopes: dict[str, dict[str, str]] = {}
    for i in range(3000):
        scope = {"tenant": "big" if rng.random() < 0.8 else f"t{rng.randrange(5)}"}
        if rng.random() < 0.7:
            scope["end_user"] = f"u{rng.randrange(40)}"
        if rng.random() < 0.1:
            scope["group"] = f"g{rng.randrange(3)}"
        if rng.random() < 0.02:
            scope["agent_self"] = "me"
        scopes[f"k{rng.randrange(10**9):09d}-{i}"] = scope
    items = [{"key": k, "scope": v, "n": 1} for k, v in scopes.items()]
    for start in range(0, len(items), 1000):
        s.put_many(items[start : start + 1000], idempotency_key=f"seed{start}", ctx=CTX)
    yield s, scopes, rng
    s.close()


def page_all(store: RatatoskrAffectStore, limit: int, **filt: Any) -> list[str]:
    keys: list[str] = []
    after = None
    while True:
        page = store.list(limit=limit, after_key=after, **filt)
        keys += [r["key"] for r in page["items"]]
        after = page["next_after_key"]
        if after is None:
            return keys


def test_random_filters_match_brute_force(big: Any) -> None:
    store, scopes, rng = big
    axes = {
        "tenant": ["big", "t0", "t1", "t4", "none"],
        "end_user": [f"u{i}" for i in range(41)],
        "group": ["g0", "g1", "g2"],
        "agent_self": ["me"],
    }

    def rand_conj() -> dict[str, str]:
        return {a: rng.choice(v) for a, v in axes.items() if rng.random() < 0.4}

    for _ in range(60):
        filt: dict[str, Any] = {}
        if rng.random() < 0.7:
            filt["scope_all"] = rand_conj()
        if rng.random() < 0.5:
            filt["scope_any"] = [rand_conj() for _ in range(rng.randint(1, 4))]
        want = sorted(
            k
            for k, s in scopes.items()
            if matches_scope(s, filt.get("scope_all"), filt.get("scope_any"))
        )
        got = page_all(store, rng.choice([1, 7, 50, 500]), **filt) if len(want) < 400 else None
        if got is None:  # broad filter: check the first pages only, to stay fast
            first = store.list(limit=500, **filt)
            assert [r["key"] for r in first["items"]] == want[:500]
            assert first["next_after_key"] == want[499]
        else:
            assert got == want, filt
