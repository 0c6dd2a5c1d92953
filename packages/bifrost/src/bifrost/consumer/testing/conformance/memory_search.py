"""Memory kit: search (seed: basic_search, scope_isolation, scope_any_union,
empty, metadata_filter_rejected, lattice_axes) and every search rule of
memory-plane.md."""

from __future__ import annotations

import random
from typing import Any

import pytest

from bifrost.consumer.testing.conformance._helpers import (
    DIM,
    basis,
    chunk,
    cosine,
    mix,
    rand_vec,
)
from bifrost.consumer.testing.conformance.memory_base import (
    MemoryKitBase,
    MemoryStoreFactory,
    seeded,
    up,
)
from bifrost.errors import InvalidArguments, InvalidFilter
from bifrost.memory.protocol import MemoryDataStore
from bifrost.scope import DEFAULT_MAX_SCOPE_ANY, matches_scope

ROW_KEYS = {"chunk", "chunk_id", "score", "recalled_view", "revision"}


def ids_of(rows: list[dict[str, Any]]) -> list[str]:
    return [r["chunk_id"] for r in rows]


class MemorySearchTests(MemoryKitBase):
    def test_basic_search(self, store: MemoryDataStore) -> None:
        recs = [
            chunk("near", mix({0: 1.0, 1: 0.1}), {"tenant": "t"}, distillate="near-view"),
            chunk("mid", mix({0: 1.0, 1: 1.0}), {"tenant": "t"}),
            chunk("far", mix({1: 1.0, 2: 0.2}), {"tenant": "t"}),
        ]
        up(store, recs, "k")
        q = basis(0)
        rows = store.search(q, top_k=2)
        assert ids_of(rows) == ["near", "mid"]
        for row, rec in zip(rows, recs, strict=False):
            assert set(row) == ROW_KEYS
            assert row["chunk"] == rec
            assert row["revision"] == 1
            assert isinstance(row["score"], float)
            assert row["score"] == pytest.approx(cosine(q, rec["embedding"]), abs=1e-5)
        assert rows[0]["recalled_view"] == "near-view"
        assert rows[1]["recalled_view"] == recs[1]
        assert ids_of(store.search(q, top_k=10)) == ["near", "mid", "far"]

    def test_recalled_view_null_distillate(self, store: MemoryDataStore) -> None:
        rec = chunk("n", basis(0), {}, distillate=None)
        up(store, [rec], "k")
        row = store.search(basis(0), top_k=1)[0]
        assert row["recalled_view"] == rec

    def test_ties_by_chunk_id(self, store: MemoryDataStore) -> None:
        v = mix({0: 0.5, 3: 0.5})
        up(store, [chunk(c, v, {}) for c in ("b2", "c3", "a1")], "k")
        up(store, [chunk("z0", basis(0), {})], "k2")
        assert ids_of(store.search(v, top_k=4)) == ["a1", "b2", "c3", "z0"]

    def test_negative_scores_still_count(self, store: MemoryDataStore) -> None:
        up(store, [chunk("pos", basis(0), {}), chunk("neg", basis(0, scale=-1.0), {})], "k")
        rows = store.search(basis(0), top_k=5)
        assert ids_of(rows) == ["pos", "neg"]
        assert rows[1]["score"] == pytest.approx(-1.0, abs=1e-5)

    def test_scope_isolation(self, store: MemoryDataStore) -> None:
        q = basis(0)
        loud = [chunk(f"a{i:03}", mix({0: 1.0, 1: i / 1000}), {"tenant": "A"}) for i in range(300)]
        quiet = [chunk(f"b{i}", mix({0: 1.0 - i / 10, 2: 1.0}), {"tenant": "B"}) for i in range(5)]
        up(store, loud, "k1")
        up(store, quiet, "k2")
        rows = store.search(q, top_k=3, scope_all={"tenant": "B"})
        assert ids_of(rows) == ["b0", "b1", "b2"]
        rows = store.search(q, top_k=10, scope_all={"tenant": "B"})
        assert ids_of(rows) == [f"b{i}" for i in range(5)]
        rows = store.search(q, top_k=1000, scope_all={"tenant": "A"})
        assert len(rows) == 300
        assert all(r["chunk"]["scope"] == {"tenant": "A"} for r in rows)

    def test_scope_all_is_conjunctive(self, store: MemoryDataStore) -> None:
        up(
            store,
            [
                chunk("tu", basis(0), {"tenant": "t", "end_user": "u"}),
                chunk("t", basis(0), {"tenant": "t"}),
                chunk("u", basis(0), {"end_user": "u"}),
            ],
            "k",
        )
        both = store.search(basis(0), top_k=10, scope_all={"tenant": "t", "end_user": "u"})
        assert ids_of(both) == ["tu"]
        assert ids_of(store.search(basis(0), top_k=10, scope_all={"tenant": "t"})) == ["t", "tu"]

    def test_scope_any_union(self, store: MemoryDataStore) -> None:
        up(
            store,
            [
                chunk("subject", basis(0), {"tenant": "t", "end_user": "u"}),
                chunk("self", basis(1), {"tenant": "t", "agent_self": "a"}),
                chunk("other", basis(0), {"tenant": "t", "end_user": "v"}),
                chunk("elsewhere", basis(0), {"tenant": "x", "end_user": "u"}),
            ],
            "k",
        )
        any_ = [{"end_user": "u"}, {"agent_self": "a"}]
        rows = store.search(basis(0), top_k=10, scope_any=any_)
        assert sorted(ids_of(rows)) == ["elsewhere", "self", "subject"]
        rows = store.search(basis(0), top_k=10, scope_all={"tenant": "t"}, scope_any=any_)
        assert sorted(ids_of(rows)) == ["self", "subject"]
        member = [{"tenant": "t", "end_user": "v"}]
        assert ids_of(store.search(basis(0), top_k=10, scope_any=member)) == ["other"]

    def test_scope_any_capped(self, store: MemoryDataStore) -> None:
        up(store, [chunk("s", basis(0), {"tenant": "t"})], "k")
        cap = getattr(store, "max_scope_any", DEFAULT_MAX_SCOPE_ANY)
        members = [{"tenant": f"m{i}"} for i in range(cap - 1)] + [{"tenant": "t"}]
        assert ids_of(store.search(basis(0), top_k=5, scope_any=members)) == ["s"]
        with pytest.raises(InvalidArguments, match="scope_any"):
            store.search(basis(0), top_k=5, scope_any=[*members, {"tenant": "x"}])

    def test_empty(self, store: MemoryDataStore) -> None:
        assert store.search(basis(0), top_k=5) == []
        assert store.search(basis(0), top_k=5, scope_all={"tenant": "t"}) == []
        up(store, [chunk("s", basis(0), {"tenant": "t"}), chunk("g", basis(1), {})], "k")
        assert sorted(ids_of(store.search(basis(0), top_k=5))) == ["g", "s"]
        assert sorted(ids_of(store.search(basis(0), top_k=5, scope_all={}, scope_any=[]))) == [
            "g",
            "s",
        ]
        # An unscoped chunk matches only unfiltered searches.
        assert ids_of(store.search(basis(1), top_k=5, scope_all={"tenant": "t"})) == ["s"]
        assert ids_of(store.search(basis(1), top_k=5, scope_any=[{"tenant": "t"}])) == ["s"]

    def test_scope_any_empty_member_matches_all(self, store: MemoryDataStore) -> None:
        up(store, [chunk("s", basis(0), {"tenant": "t"}), chunk("g", basis(1), {})], "k")
        rows = store.search(basis(0), top_k=5, scope_any=[{}, {"tenant": "zzz"}])
        assert sorted(ids_of(rows)) == ["g", "s"]

    @pytest.mark.parametrize("mf", [{"tenant": "t"}, {"x": 1}, "x", [], 0])
    def test_metadata_filter_rejected(self, store: MemoryDataStore, mf: Any) -> None:
        seeded(store)
        with pytest.raises(InvalidArguments):
            store.search(basis(0), top_k=1, metadata_filter=mf)

    def test_metadata_filter_empty_accepted(self, store: MemoryDataStore) -> None:
        seeded(store)
        base = store.search(basis(0), top_k=2)
        assert store.search(basis(0), top_k=2, metadata_filter={}) == base
        assert store.search(basis(0), top_k=2, metadata_filter=None) == base

    @pytest.mark.parametrize(
        ("scope_all", "scope_any"),
        [
            ({"planet": "x"}, None),
            ({"tenant": "t", "org": "o"}, None),
            (None, [{"planet": "x"}]),
            (None, [{"tenant": "t"}, {"Tenant": "t"}]),
            ({"tenant": "t"}, [{"agent": "a"}]),
        ],
    )
    def test_lattice_axes(self, store: MemoryDataStore, scope_all: Any, scope_any: Any) -> None:
        seeded(store)
        with pytest.raises(InvalidFilter):
            store.search(basis(0), top_k=1, scope_all=scope_all, scope_any=scope_any)

    @pytest.mark.parametrize(
        ("scope_all", "scope_any"),
        [
            (None, {"tenant": "t"}),
            (None, "tenant"),
            (None, ["tenant"]),
            (None, [None]),
            (["tenant"], None),
            ("tenant=t", None),
            ({"tenant": ""}, None),
            ({"tenant": 3}, None),
            ({"tenant": None}, None),
            (None, [{"tenant": ""}]),
            (None, [{"tenant": {"nested": "x"}}]),
        ],
    )
    def test_scope_shape_rejected(
        self, store: MemoryDataStore, scope_all: Any, scope_any: Any
    ) -> None:
        seeded(store)
        with pytest.raises(InvalidArguments):
            store.search(basis(0), top_k=1, scope_all=scope_all, scope_any=scope_any)

    @pytest.mark.parametrize("axis", ["end_user", "group", "tenant", "agent_self"])
    def test_every_lattice_axis_admitted(self, store: MemoryDataStore, axis: str) -> None:
        up(store, [chunk("in", basis(0), {axis: "v"}), chunk("out", basis(0), {axis: "w"})], "k")
        assert ids_of(store.search(basis(0), top_k=5, scope_all={axis: "v"})) == ["in"]
        assert ids_of(store.search(basis(0), top_k=5, scope_any=[{axis: "w"}])) == ["out"]

    @pytest.mark.parametrize("top_k", [0, -1, True, False, 1.5, "3", None, 6])
    def test_top_k_rules(self, make_store: MemoryStoreFactory, top_k: Any) -> None:
        s = make_store(embedding_dim=DIM, max_top_k=5)
        seeded(s)
        with pytest.raises(InvalidArguments):
            s.search(basis(0), top_k=top_k)

    def test_top_k_at_max(self, make_store: MemoryStoreFactory) -> None:
        s = make_store(embedding_dim=DIM, max_top_k=5)
        up(s, [chunk(f"c{i}", basis(i), {}) for i in range(7)], "k")
        assert len(s.search(basis(0), top_k=5)) == 5

    @pytest.mark.parametrize(
        "vector",
        [
            basis(0)[:-1],
            [*basis(0), 1.0],
            [0.0] * DIM,
            [float("nan"), *basis(0)[1:]],
            [float("inf"), *basis(0)[1:]],
            [True, *basis(0)[1:]],
            ["1", *basis(0)[1:]],
            None,
            "0,1",
            {"0": 1},
        ],
    )
    def test_vector_rules(self, store: MemoryDataStore, vector: Any) -> None:
        seeded(store)
        with pytest.raises(InvalidArguments):
            store.search(vector, top_k=1)

    def test_integer_vector_accepted(self, store: MemoryDataStore) -> None:
        seeded(store)
        assert ids_of(store.search([0, 3, 0, 0, 0, 0, 0, 0], top_k=1)) == ["b"]

    def test_include_embedding_false(self, store: MemoryDataStore) -> None:
        r1 = chunk("e", basis(0), {})
        r2 = {"id": "v", "vector": basis(1), "scope": {}, "content": "x"}
        up(store, [r1, r2], "k")
        rows = {
            r["chunk_id"]: r for r in store.search(basis(0), top_k=2, include={"embedding": False})
        }
        assert "embedding" not in rows["e"]["chunk"]
        assert "vector" not in rows["v"]["chunk"]
        assert rows["e"]["chunk"] == {k: v for k, v in r1.items() if k != "embedding"}
        assert rows["e"]["recalled_view"] == rows["e"]["chunk"]
        assert store.get("e") == {**r1, "revision": 1}
        assert store.get("v") == {**r2, "revision": 1}
        for inc in (None, {}, {"embedding": True}):
            rows = {r["chunk_id"]: r for r in store.search(basis(0), top_k=2, include=inc)}
            assert rows["e"]["chunk"] == r1
            assert rows["v"]["chunk"] == r2

    @pytest.mark.parametrize(
        "include", [{"embedding": "no"}, {"embedding": 0}, {"content": False}, "embedding", []]
    )
    def test_include_rules(self, store: MemoryDataStore, include: Any) -> None:
        seeded(store)
        with pytest.raises(InvalidArguments):
            store.search(basis(0), top_k=1, include=include)

    @pytest.mark.parametrize("target", [None, 0.5, "high", {"x": 1}])
    def test_fidelity_target_ignored(self, store: MemoryDataStore, target: Any) -> None:
        seeded(store)
        base = store.search(basis(0), top_k=2)
        assert store.search(basis(0), top_k=2, fidelity_target=target) == base

    def test_search_sees_updates(self, store: MemoryDataStore) -> None:
        up(store, [chunk("m", basis(0), {"tenant": "t"}), chunk("n", basis(1), {})], "k1")
        up(store, [chunk("m", basis(1), {"tenant": "u"}, v=2)], "k2")
        assert ids_of(store.search(basis(1), top_k=2)) == ["m", "n"]
        m = next(r for r in store.search(basis(1), top_k=2) if r["chunk_id"] == "m")
        assert m["revision"] == 2
        assert m["chunk"]["v"] == 2
        assert store.search(basis(1), top_k=5, scope_all={"tenant": "t"}) == []
        assert ids_of(store.search(basis(1), top_k=5, scope_all={"tenant": "u"})) == ["m"]

    def test_exact_recall_against_brute_force(self, store: MemoryDataStore) -> None:
        rng = random.Random(20260616)  # noqa: S311 - reproducible test data
        tenants = ["t0", "t1", "t2"]
        recs = []
        for i in range(240):
            scope = {"tenant": tenants[i % 3]}
            if i % 4 == 0:
                scope["end_user"] = f"u{i % 5}"
            recs.append(chunk(f"c{i:03}", rand_vec(rng), scope))
        up(store, recs[:120], "k1")
        up(store, recs[120:], "k2")
        filters: list[tuple[dict[str, str], list[dict[str, str]]]] = [
            ({}, []),
            ({"tenant": "t1"}, []),
            ({}, [{"end_user": "u0"}, {"tenant": "t2"}]),
            ({"tenant": "t0"}, [{"end_user": "u3"}, {"end_user": "u4"}]),
        ]
        for _ in range(6):
            q = rand_vec(rng)
            for scope_all, scope_any in filters:
                for top_k in (1, 7, 50):
                    rows = store.search(q, top_k=top_k, scope_all=scope_all, scope_any=scope_any)
                    in_scope = [r for r in recs if matches_scope(r["scope"], scope_all, scope_any)]
                    oracle = sorted(
                        ((cosine(q, r["embedding"]), r["id"]) for r in in_scope),
                        key=lambda t: (-t[0], t[1]),
                    )[:top_k]
                    assert len(rows) == len(oracle)
                    for row, (score, _) in zip(rows, oracle, strict=True):
                        assert matches_scope(row["chunk"]["scope"], scope_all, scope_any)
                        assert row["score"] == pytest.approx(score, abs=1e-5)
                        true = cosine(q, row["chunk"]["embedding"])
                        assert row["score"] == pytest.approx(true, abs=1e-5)
                    # Exact top-k: only near-ties at the cut may be swapped.
                    cut = oracle[-1][0] - 1e-5
                    allowed = {r["id"] for r in in_scope if cosine(q, r["embedding"]) >= cut}
                    assert set(ids_of(rows)) <= allowed
