"""``AffectStoreConformance``: the affect-plane conformance kit.

A real store's test module subclasses it and provides ``make_store``::

    class TestSqliteAffectStore(AffectStoreConformance):
        @pytest.fixture
        def make_store(self, tmp_path):
            def make(*, max_batch=1000, max_page=500, clock=time.time, quota=NO_QUOTA):
                ...  # a fresh, empty, independent store on every call
            return make

``clock`` (seconds since the epoch) must drive both the idempotency TTL and
``recorded_at``; ``quota`` (:class:`bifrost.quota.Quota`) is the store's per-tenant
quota. The kit's ``store`` fixture is ``make_store()``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

import pytest

from bifrost.affect.dispatch import dispatch_affect_call
from bifrost.affect.protocol import AFFECT_CAPABILITIES, AffectDataStore
from bifrost.consumer.testing.affect_store import InMemoryAffectStore
from bifrost.consumer.testing.conformance._helpers import (
    IDEMPOTENCY_TTLS,
    T0,
    ManualClock,
    affect_snapshot,
    ctx,
    ledger_lifetime,
    rejects,
    run_concurrently,
)
from bifrost.consumer.testing.conformance.grants import AffectGrantTests
from bifrost.consumer.testing.conformance.parity import run_parity
from bifrost.consumer.testing.conformance.quota import AffectQuotaTests
from bifrost.errors import IdempotencyConflict, InvalidArguments, InvalidFilter, RevisionMismatch
from bifrost.quota import Quota
from bifrost.scope import DEFAULT_MAX_SCOPE_ANY

__all__ = ["AffectStoreConformance", "AffectStoreFactory"]

CTX = ctx(plane="affect")


class AffectStoreFactory(Protocol):
    def __call__(
        self,
        *,
        max_batch: int = ...,
        max_page: int = ...,
        clock: Callable[[], float] = ...,
        quota: Quota = ...,
    ) -> AffectDataStore: ...


def rec(key: str, scope: dict[str, str] | None = None, **state: Any) -> dict[str, Any]:
    return {"key": key, "scope": dict(scope or {}), **(state or {"valence": 0.5})}


def put(store: AffectDataStore, records: list[dict[str, Any]], key: str, **kw: Any) -> Any:
    return store.put_many(records, idempotency_key=key, ctx=kw.pop("ctx", CTX), **kw)


def strip(r: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in r.items() if k not in ("revision", "recorded_at")}


def env(verb: str, args: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    out = {"wire_version": "0.6", "call_id": f"call-{verb}", "verb": verb, "args": args or {}}
    return {**out, **extra}


class AffectStoreConformance(AffectGrantTests, AffectQuotaTests):
    """Every rule of affect-plane.md, and the write grant, against ``store``."""

    @pytest.fixture
    def make_store(self) -> AffectStoreFactory:
        raise NotImplementedError("subclass the kit and provide a make_store fixture")

    @pytest.fixture
    def store(self, make_store: AffectStoreFactory) -> AffectDataStore:
        return make_store()

    @staticmethod
    def snap(store: AffectDataStore, keys: list[str]) -> Callable[[], Any]:
        return lambda: affect_snapshot(store, keys)

    def seed(self, store: AffectDataStore) -> list[str]:
        put(store, [rec("k1", {"tenant": "t"}, v=1), rec("k2", {"end_user": "u"}, v=1)], "seed")
        put(store, [rec("k1", {"tenant": "t"}, v=2)], "seed2")
        return ["k1", "k2"]

    # --- describe / health --------------------------------------------------------
    def test_caps(self, store: AffectDataStore) -> None:
        assert store.describe_store() == AFFECT_CAPABILITIES
        assert list(store.describe_store()) == list(AFFECT_CAPABILITIES)

    def test_health(self, make_store: AffectStoreFactory) -> None:
        s = make_store(max_batch=5, max_page=7)
        assert s.health() == {"status": "ok", "plane": "affect", "max_batch": 5, "max_page": 7}

    # --- put_many / get -------------------------------------------------------------
    def test_put_and_get(self, make_store: AffectStoreFactory) -> None:
        clock = ManualClock()
        s = make_store(clock=clock)
        r = rec("agent:subject", {"agent_self": "a"}, valence=-0.25, labels=["wary", "ü"])
        assert put(s, [r], "i1") == {"written": 1, "replayed": False}
        got = s.get("agent:subject")
        assert got is not None
        assert strip(got) == r
        assert got["revision"] == 1
        assert isinstance(got.get("recorded_at"), str)
        assert got["recorded_at"].endswith("Z")
        stamp = datetime.fromisoformat(got["recorded_at"].replace("Z", "+00:00"))
        assert stamp.tzinfo is not None
        assert stamp.utcoffset() == UTC.utcoffset(None)
        assert abs(stamp.timestamp() - T0) < 1e-3
        clock.advance(10)
        put(s, [{**r, "valence": 0.75}], "i2")
        got2 = s.get("agent:subject")
        assert got2 is not None
        assert (got2["revision"], got2["valence"]) == (2, 0.75)
        ts2 = datetime.fromisoformat(got2["recorded_at"].replace("Z", "+00:00")).timestamp()
        assert abs(ts2 - (T0 + 10)) < 1e-3

    def test_verbatim(self, store: AffectDataStore) -> None:
        r = rec("k", {}, deep={"a": [1, 2.5, None, {"b": "ñ🦊"}]}, big=2**62, tiny=1e-300)
        put(store, [r], "i")
        got = store.get("k")
        assert got is not None
        assert strip(got) == r

    def test_get_absent(self, store: AffectDataStore) -> None:
        assert store.get("nope") is None

    def test_get_many(self, store: AffectDataStore) -> None:
        self.seed(store)
        got = store.get_many(["k2", "nope", "k1", "k2"])
        assert [g["key"] for g in got] == ["k2", "k1"]
        assert [g["revision"] for g in got] == [1, 2]
        assert store.get_many([]) == []

    def test_empty_batch(self, store: AffectDataStore) -> None:
        keys = self.seed(store)
        before = affect_snapshot(store, keys)
        assert put(store, [], "e") == {"written": 0, "replayed": False}
        assert affect_snapshot(store, keys) == before

    @pytest.mark.parametrize(
        "bad",
        [
            {"scope": {}},
            {"key": "", "scope": {}},
            {"key": 5, "scope": {}},
            {"key": "x" * 513, "scope": {}},
            {"key": "x"},
            {"key": "x", "scope": None},
            {"key": "x", "scope": {"planet": "p"}},
            {"key": "x", "scope": {"tenant": ""}},
            {"key": "x", "scope": {"tenant": 1}},
            {"key": "x", "scope": {}, "revision": 3},
            {"key": "x", "scope": {}, "recorded_at": "2020-01-01T00:00:00Z"},
            {"key": "x", "scope": {}, "v": float("nan")},
        ],
    )
    def test_invalid_record(self, store: AffectDataStore, bad: dict[str, Any]) -> None:
        keys = [*self.seed(store), "x", "good"]
        with rejects(InvalidArguments, self.snap(store, keys)):
            put(store, [rec("good"), bad], "i")

    @pytest.mark.parametrize("records", [None, {}, "r", [1], [None]])
    def test_invalid_container(self, store: AffectDataStore, records: Any) -> None:
        keys = self.seed(store)
        with rejects(InvalidArguments, self.snap(store, keys)):
            put(store, records, "i")

    def test_duplicate_keys(self, store: AffectDataStore) -> None:
        keys = [*self.seed(store), "d"]
        with rejects(InvalidArguments, self.snap(store, keys)):
            put(store, [rec("d"), rec("d")], "i")

    def test_max_batch(self, make_store: AffectStoreFactory) -> None:
        s = make_store(max_batch=2)
        with rejects(InvalidArguments, self.snap(s, ["a", "b", "c"])):
            put(s, [rec("a"), rec("b"), rec("c")], "i")
        assert put(s, [rec("a"), rec("b")], "i2")["written"] == 2
        with pytest.raises(InvalidArguments):
            s.get_many(["a", "b", "c"])
        with pytest.raises(InvalidArguments):
            s.delete_many(["a", "b", "c"])

    @pytest.mark.parametrize("key", [None, "", 1, "k" * 257])
    def test_idempotency_key_rules(self, store: AffectDataStore, key: Any) -> None:
        keys = [*self.seed(store), "n"]
        with rejects(InvalidArguments, self.snap(store, keys)):
            store.put_many([rec("n")], idempotency_key=key, ctx=CTX)

    @pytest.mark.parametrize("cls", ["", "weekly", 7])
    def test_idempotency_class_rules(self, store: AffectDataStore, cls: Any) -> None:
        keys = [*self.seed(store), "n"]
        with rejects(InvalidArguments, self.snap(store, keys)):
            put(store, [rec("n")], "i", idempotency_class=cls)

    def test_replay_and_conflict(self, store: AffectDataStore) -> None:
        assert put(store, [rec("r", v=1)], "same")["replayed"] is False
        assert put(store, [rec("r", v=1)], "same") == {"written": 1, "replayed": True}
        assert store.history("r")["items"][0]["revision"] == 1
        assert len(store.history("r")["items"]) == 1
        with rejects(IdempotencyConflict, self.snap(store, ["r", "s"])):
            put(store, [rec("s", v=1)], "same")
        with rejects(IdempotencyConflict, self.snap(store, ["r"])):
            put(store, [rec("r", v=1)], "same", expected_revisions={"r": 1})

    def test_idempotency_actor_scoped(self, store: AffectDataStore) -> None:
        put(store, [rec("a", v=1)], "same", ctx=ctx("alice", plane="affect"))
        out = put(store, [rec("a", v=2)], "same", ctx=ctx("bob", plane="affect"))
        assert out == {"written": 1, "replayed": False}
        got = store.get("a")
        assert got is not None
        assert got["revision"] == 2

    @pytest.mark.parametrize(("cls", "ttl"), IDEMPOTENCY_TTLS)
    def test_idempotency_ttl(
        self, make_store: AffectStoreFactory, cls: str | None, ttl: int
    ) -> None:
        clock = ManualClock()
        s = make_store(clock=clock)

        def write(v: int) -> Any:
            return put(s, [rec("t", v=v)], "k", idempotency_class=cls)

        ledger_lifetime(write, clock, ttl, first=1, other=2, after=2)
        got = s.get("t")
        assert got is not None
        assert (got["revision"], got["v"]) == (2, 2)

    def test_optimistic_lock(self, store: AffectDataStore) -> None:
        keys = [*self.seed(store), "new"]
        with rejects(RevisionMismatch, self.snap(store, keys)):
            put(store, [rec("new"), rec("k1", v=3)], "i", expected_revisions={"k1": 1})
        with pytest.raises(RevisionMismatch) as info:
            put(store, [rec("k1", v=3)], "i2", expected_revisions={"k1": 9})
        assert info.value.details == {"id": "k1", "expected": 9, "actual": 2}
        out = put(store, [rec("k1", {"tenant": "t"}, v=3)], "i3", expected_revisions={"k1": 2})
        assert out["written"] == 1
        with rejects(RevisionMismatch, self.snap(store, keys)):
            put(store, [rec("k2", v=9)], "i4", expected_revisions={"k2": 0})
        assert put(store, [rec("new")], "i5", expected_revisions={"new": 0})["written"] == 1

    @pytest.mark.parametrize(
        "expected", [[], "x", {"other": 1}, {"e": -1}, {"e": True}, {"e": 1.5}, {"e": None}]
    )
    def test_expected_revisions_shape(self, store: AffectDataStore, expected: Any) -> None:
        keys = [*self.seed(store), "e"]
        with rejects(InvalidArguments, self.snap(store, keys)):
            put(store, [rec("e")], "i", expected_revisions=expected)

    # --- history ------------------------------------------------------------------
    def test_history_newest_first_and_paging(self, store: AffectDataStore) -> None:
        for i in range(1, 8):
            put(store, [rec("h", v=i)], f"i{i}")
        page = store.history("h", limit=3)
        assert [r["revision"] for r in page["items"]] == [7, 6, 5]
        assert [r["v"] for r in page["items"]] == [7, 6, 5]
        assert page["next_before_revision"] == 5
        put(store, [rec("h", v=8)], "i8")  # a concurrent write does not disturb the cursor
        page = store.history("h", limit=3, before_revision=5)
        assert [r["revision"] for r in page["items"]] == [4, 3, 2]
        assert page["next_before_revision"] == 2
        page = store.history("h", limit=3, before_revision=2)
        assert [r["revision"] for r in page["items"]] == [1]
        assert page["next_before_revision"] is None
        page = store.history("h", limit=1)
        assert [r["revision"] for r in page["items"]] == [8]
        exact = store.history("h", limit=8)
        assert len(exact["items"]) == 8
        assert exact["next_before_revision"] is None

    def test_history_default_limit(self, store: AffectDataStore) -> None:
        for i in range(1, 53):
            put(store, [rec("h", v=i)], f"i{i}")
        page = store.history("h")
        assert len(page["items"]) == 50
        assert page["next_before_revision"] == 3

    def test_history_absent(self, store: AffectDataStore) -> None:
        assert store.history("nope") == {"items": [], "next_before_revision": None}

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"limit": 0},
            {"limit": 8},
            {"limit": True},
            {"limit": "3"},
            {"before_revision": 0},
            {"before_revision": -2},
            {"before_revision": True},
            {"before_revision": 1.5},
        ],
    )
    def test_history_args(self, make_store: AffectStoreFactory, kwargs: dict[str, Any]) -> None:
        s = make_store(max_page=7)
        self.seed(s)
        with pytest.raises(InvalidArguments):
            s.history("k1", **kwargs)
        assert len(s.history("k1", limit=7)["items"]) == 2

    @pytest.mark.parametrize("key", ["", None, 3, "x" * 513])
    def test_key_rules_on_reads(self, store: AffectDataStore, key: Any) -> None:
        for call in (store.get, store.history):
            with pytest.raises(InvalidArguments):
                call(key)
        with pytest.raises(InvalidArguments):
            store.get_many([key])
        with pytest.raises(InvalidArguments):
            store.delete_many([key])

    # --- list -----------------------------------------------------------------------
    def test_list(self, store: AffectDataStore) -> None:
        put(
            store,
            [
                rec("c", {"tenant": "t", "end_user": "u"}),
                rec("a", {"tenant": "t"}),
                rec("b", {"tenant": "x"}),
                rec("d", {}),
            ],
            "i",
        )
        assert [r["key"] for r in store.list()["items"]] == ["a", "b", "c", "d"]
        out = store.list(scope_all={"tenant": "t"})
        assert [r["key"] for r in out["items"]] == ["a", "c"]
        assert out["next_after_key"] is None
        out = store.list(scope_any=[{"end_user": "u"}, {"tenant": "x"}])
        assert [r["key"] for r in out["items"]] == ["b", "c"]
        item = store.list(scope_all={"tenant": "x"})["items"][0]
        assert item["revision"] == 1
        assert "recorded_at" in item

    def test_list_scope_any_capped(self, store: AffectDataStore) -> None:
        put(store, [rec("a", {"tenant": "t"})], "i")
        cap = getattr(store, "max_scope_any", DEFAULT_MAX_SCOPE_ANY)
        members = [{"tenant": f"m{i}"} for i in range(cap - 1)] + [{"tenant": "t"}]
        assert [r["key"] for r in store.list(scope_any=members)["items"]] == ["a"]
        with pytest.raises(InvalidArguments, match="scope_any"):
            store.list(scope_any=[*members, {"tenant": "x"}])

    def test_list_paging_stable(self, store: AffectDataStore) -> None:
        put(store, [rec(f"k{i:02}") for i in range(0, 10, 2)], "i")
        page = store.list(limit=2)
        assert [r["key"] for r in page["items"]] == ["k00", "k02"]
        assert page["next_after_key"] == "k02"
        put(store, [rec("k01"), rec("k05")], "i2")  # one before, one after the cursor
        page = store.list(limit=2, after_key="k02")
        assert [r["key"] for r in page["items"]] == ["k04", "k05"]
        page = store.list(limit=3, after_key=page["next_after_key"])
        assert [r["key"] for r in page["items"]] == ["k06", "k08"]
        assert page["next_after_key"] is None

    def test_list_uses_current_scope(self, store: AffectDataStore) -> None:
        put(store, [rec("m", {"tenant": "old"})], "i1")
        put(store, [rec("m", {"tenant": "new"})], "i2")
        assert store.list(scope_all={"tenant": "old"})["items"] == []
        assert [r["key"] for r in store.list(scope_all={"tenant": "new"})["items"]] == ["m"]

    def test_list_default_limit(self, store: AffectDataStore) -> None:
        put(store, [rec(f"k{i:03}") for i in range(55)], "i")
        page = store.list()
        assert len(page["items"]) == 50
        assert page["next_after_key"] == "k049"

    @pytest.mark.parametrize(
        ("kwargs", "exc"),
        [
            ({"limit": 0}, InvalidArguments),
            ({"limit": 8}, InvalidArguments),
            ({"limit": False}, InvalidArguments),
            ({"after_key": 3}, InvalidArguments),
            ({"after_key": ""}, InvalidArguments),
            ({"scope_all": ["tenant"]}, InvalidArguments),
            ({"scope_any": {"tenant": "t"}}, InvalidArguments),
            ({"scope_all": {"tenant": ""}}, InvalidArguments),
            ({"scope_all": {"planet": "p"}}, InvalidFilter),
            ({"scope_any": [{"planet": "p"}]}, InvalidFilter),
        ],
    )
    def test_list_args(
        self, make_store: AffectStoreFactory, kwargs: dict[str, Any], exc: type[Exception]
    ) -> None:
        s = make_store(max_page=7)
        self.seed(s)
        with pytest.raises(exc):
            s.list(**kwargs)

    # --- delete_many ----------------------------------------------------------------
    def test_delete_erases_history(self, store: AffectDataStore) -> None:
        self.seed(store)
        assert store.delete_many(["k1", "k1", "ghost"]) == {"deleted": 1}
        assert store.get("k1") is None
        assert store.history("k1") == {"items": [], "next_before_revision": None}
        assert [r["key"] for r in store.list()["items"]] == ["k2"]
        assert store.delete_many([]) == {"deleted": 0}
        put(store, [rec("k1", v=9)], "again", expected_revisions={"k1": 0})
        got = store.get("k1")
        assert got is not None
        assert got["revision"] == 1
        assert len(store.history("k1")["items"]) == 1

    def test_concurrent_puts(self, store: AffectDataStore) -> None:
        def work(t: int) -> None:
            for i in range(20):
                put(store, [rec("shared", v=i), rec(f"t{t}-{i}")], f"{t}-{i}")

        assert run_concurrently(work) == []
        got = store.get("shared")
        assert got is not None
        assert got["revision"] == 80
        revs = [r["revision"] for r in store.history("shared", limit=100)["items"]]
        assert revs == list(range(80, 0, -1))

    # --- dispatch and parity ----------------------------------------------------------
    def test_dispatch_shapes(self, store: AffectDataStore) -> None:
        r = rec("w", {"tenant": "t"})
        out = dispatch_affect_call(
            store, env("put_many", {"records": [r]}, idempotency_key="i"), CTX
        )
        assert out == {"written": 1, "replayed": False}
        got = dispatch_affect_call(store, env("get", {"key": "w"}), CTX)
        assert strip(got) == r
        assert dispatch_affect_call(store, env("describe_store"), CTX) == AFFECT_CAPABILITIES

    def test_parity_vs_reference(self, make_store: AffectStoreFactory) -> None:
        c = ctx(scope={"tenant": "t"}, plane="affect")
        recs = [rec(f"s{i}", {"tenant": "t", "end_user": f"u{i % 2}"}, v=i) for i in range(6)]
        envelopes = [
            env("describe_store"),
            env("health"),
            env("put_many", {"records": recs}, idempotency_key="i1"),
            env("put_many", {"records": recs}, idempotency_key="i1"),
            env("put_many", {"records": recs[:2]}, idempotency_key="i1"),
            env("put_many", {"records": recs[:2]}, idempotency_key="i2"),
            env(
                "put_many",
                {"records": recs[:1], "expected_revisions": {"s0": 1}},
                idempotency_key="i3",
            ),
            env(
                "put_many",
                {"records": [{**recs[0], "scope": {"tenant": "x"}}]},
                idempotency_key="i4",
            ),
            env("get", {"key": "s0"}),
            env("get_many", {"keys": ["s1", "nope", "s0"]}),
            env("history", {"key": "s0", "limit": 1}),
            env("history", {"key": "s0", "before_revision": 2}),
            env("list", {"limit": 4}),
            env("list", {"after_key": "s3", "scope_any": [{"end_user": "u1"}]}),
            env("list", {"scope_all": {"planet": "p"}}),
            env("delete_many", {"keys": ["s0", "nope"]}),
            env("get", {"key": "s0"}),
            env("frobnicate"),
        ]
        run_parity(make_store(), InMemoryAffectStore(), envelopes, c)
