"""Retention and ``forget`` in the conformance kit (memory-plane.md "Retention" and
"Erasure"; ``ratatoskr forget``'s contract on every store).

A store's test module subclasses :class:`MemoryErasureConformance` and provides::

    @pytest.fixture
    def make_store(self):
        def make(*, retention_s=None, clock=time.time):
            ...  # a fresh, empty memory store (embedding_dim 8) with that retention
        return make

and :class:`AffectForgetConformance` with the affect kit's own ``make_store``. The
memory store must offer ``sweep_expired(limit=None) -> int`` (erase expired
chunks now: what its background sweep runs) and ``forget(scope, dry_run=False)``;
the affect store ``forget`` too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import pytest

from bifrost.consumer.testing.conformance._helpers import (
    ManualClock,
    basis,
    chunk,
    ctx,
    mix,
)
from bifrost.consumer.testing.conformance.affect import AffectStoreFactory, put, rec
from bifrost.errors import Forbidden, InvalidArguments, RevisionMismatch

__all__ = ["AffectForgetConformance", "MemoryErasureConformance", "RetentionStoreFactory"]

CTX = ctx()
RETENTION = 3600.0
USER = {"tenant": "t1", "end_user": "u1"}
OTHER = {"tenant": "t1", "end_user": "u2"}


class RetentionStoreFactory(Protocol):
    def __call__(
        self, *, retention_s: float | None = ..., clock: Callable[[], float] = ...
    ) -> Any: ...


def up(store: Any, records: list[dict[str, Any]], key: str, **kw: Any) -> Any:
    return store.upsert_many(records, idempotency_key=key, ctx=kw.pop("ctx", CTX), **kw)


def ids_of(rows: list[dict[str, Any]]) -> list[str]:
    return [r.get("chunk_id") or r["id"] for r in rows]


def walk(store: Any, limit: int, **kw: Any) -> list[str]:
    """Every id a scan walk in pages of ``limit`` returns, in order."""
    out: list[str] = []
    after = None
    while True:
        page = store.scan(limit=limit, after_id=after, **kw)
        out += [r["id"] for r in page["items"]]
        after = page["next_after_id"]
        if after is None:
            return out


class MemoryErasureConformance:
    """Retention (expiry by the store's clock, exact reads, the sweep) and ``forget``."""

    @pytest.fixture
    def make_store(self) -> RetentionStoreFactory:
        raise NotImplementedError("subclass the kit and provide a make_store fixture")

    @pytest.fixture
    def clock(self) -> ManualClock:
        return ManualClock()

    @pytest.fixture
    def store(self, make_store: RetentionStoreFactory, clock: ManualClock) -> Any:
        return make_store(retention_s=RETENTION, clock=clock)

    # -- retention ----------------------------------------------------------------------

    def test_expired_chunk_is_returned_by_no_read(self, store: Any, clock: ManualClock) -> None:
        up(store, [chunk("old", basis(0), USER), chunk("kept", basis(1), USER)], "w1")
        clock.advance(RETENTION / 2)
        up(store, [chunk("kept", basis(1), USER, content="again")], "w2")  # rewritten: renewed
        clock.advance(RETENTION / 2)  # "old" is exactly RETENTION old: not yet expired
        assert store.get("old") is not None
        clock.advance(1)
        assert store.get("old") is None
        assert ids_of(store.get_many(["old", "kept"])) == ["kept"]
        assert store.scopes_of(["old", "kept"]) == {"kept": USER}
        assert [h["chunk_id"] for h in store.search(basis(0), top_k=5)] == ["kept"]
        assert [h["chunk_id"] for h in store.search(basis(0), top_k=5, scope_all=USER)] == ["kept"]
        assert [r["id"] for r in store.scan()["items"]] == ["kept"]
        assert [r["id"] for r in store.scan(scope_all=USER)["items"]] == ["kept"]

    def test_without_retention_nothing_expires(
        self, make_store: RetentionStoreFactory, clock: ManualClock
    ) -> None:
        store = make_store(retention_s=None, clock=clock)
        up(store, [chunk("a", basis(0), USER)], "w")
        clock.advance(10 * 365 * 86400)
        assert store.get("a") is not None
        assert store.sweep_expired() == 0

    def test_retention_must_be_positive(
        self, make_store: RetentionStoreFactory, clock: ManualClock
    ) -> None:
        for bad in (0, -1.0, float("nan"), float("inf")):
            with pytest.raises((InvalidArguments, ValueError)):
                make_store(retention_s=bad, clock=clock)

    def test_search_stays_exact_past_expired_neighbours(
        self, store: Any, clock: ManualClock
    ) -> None:
        # Ten expired chunks nearer the query than every live one.
        up(store, [chunk(f"x{i}", mix({0: 1.0, 1: 0.01 * i}), USER) for i in range(10)], "old")
        clock.advance(RETENTION + 1)
        live = [chunk(f"y{i}", mix({0: 0.5, 1: 0.1 * (i + 1)}), USER) for i in range(6)]
        up(store, live, "new")
        full = store.search(basis(0), top_k=6, scope_all=USER)
        assert sorted(h["chunk_id"] for h in full) == sorted(c["id"] for c in live)
        top3 = store.search(basis(0), top_k=3)
        assert [h["chunk_id"] for h in top3] == [h["chunk_id"] for h in full[:3]]
        assert len(store.search(basis(0), top_k=50)) == 6

    def test_scan_pages_over_live_chunks_only(self, store: Any, clock: ManualClock) -> None:
        up(store, [chunk(f"c{i:02d}", basis(i), USER) for i in range(0, 20, 2)], "old")
        clock.advance(RETENTION / 2)
        up(store, [chunk(f"c{i:02d}", basis(i), USER) for i in range(1, 20, 2)], "new")
        clock.advance(RETENTION / 2 + 1)  # the even ones expired, interleaved
        odd = [f"c{i:02d}" for i in range(1, 20, 2)]
        for limit in (1, 2, 3, 10, 50):
            assert walk(store, limit) == odd
            assert walk(store, limit, scope_all=USER) == odd
        assert store.scan(limit=10)["next_after_id"] is None

    def test_delete_many_does_not_count_expired(self, store: Any, clock: ManualClock) -> None:
        up(store, [chunk("old", basis(0), USER)], "w1")
        clock.advance(RETENTION + 1)
        up(store, [chunk("new", basis(1), USER)], "w2")
        assert store.delete_many(["old", "new", "never"]) == {"deleted": 1}
        assert store.get("old") is None and store.get("new") is None
        assert store.sweep_expired() == 0  # the delete erased it

    def test_upsert_of_expired_id_starts_at_revision_one(
        self, store: Any, clock: ManualClock
    ) -> None:
        for n in range(3):
            up(store, [chunk("c", basis(0), USER, n=n)], f"w{n}")
        assert store.get("c")["revision"] == 3
        clock.advance(RETENTION + 1)
        with pytest.raises(RevisionMismatch):  # the expired revision is not there
            up(store, [chunk("c", basis(1), USER)], "w3", expected_revisions={"c": 3})
        up(store, [chunk("c", basis(1), USER, n=9)], "w4", expected_revisions={"c": 0})
        got = store.get("c")
        assert got["revision"] == 1 and got["n"] == 9

    def test_expired_chunk_of_another_grant_reads_absent_and_can_be_written(
        self, store: Any, clock: ManualClock
    ) -> None:
        a, b = ctx(scope={"tenant": "ta"}), ctx(scope={"tenant": "tb"})
        up(store, [chunk("shared", basis(0), {"tenant": "ta"})], "a", ctx=a)
        with pytest.raises(Forbidden):
            up(store, [chunk("shared", basis(0), {"tenant": "tb"})], "b1", ctx=b)
        clock.advance(RETENTION + 1)
        up(store, [chunk("shared", basis(2), {"tenant": "tb"})], "b2", ctx=b)
        got = store.get("shared")
        assert got["scope"] == {"tenant": "tb"} and got["revision"] == 1

    def test_sweep_erases_expired_chunks_only(self, store: Any, clock: ManualClock) -> None:
        up(store, [chunk(f"old{i}", basis(i), USER) for i in range(5)], "w1")
        clock.advance(RETENTION / 2)
        up(store, [chunk(f"new{i}", basis(i), OTHER) for i in range(3)], "w2")
        clock.advance(RETENTION / 2 + 1)
        assert store.sweep_expired(limit=2) == 2  # bounded
        assert store.sweep_expired() == 3
        assert store.sweep_expired() == 0
        assert ids_of(store.get_many([f"new{i}" for i in range(3)])) == [
            f"new{i}" for i in range(3)
        ]
        assert store.forget({"end_user": "u1"}, dry_run=True) == 0  # nothing of them left
        clock.advance(RETENTION)
        assert store.sweep_expired() == 3

    # -- forget -------------------------------------------------------------------------

    def test_forget_erases_exactly_the_scope(self, store: Any, clock: ManualClock) -> None:
        up(
            store,
            [chunk(f"u1-{i}", basis(i), USER) for i in range(4)]
            + [chunk(f"u2-{i}", basis(i), OTHER) for i in range(3)]
            + [chunk("t2-u1", basis(0), {"tenant": "t2", "end_user": "u1"})]
            + [chunk("t1", basis(0), {"tenant": "t1"})],
            "w",
        )
        assert store.forget({"end_user": "u1", "tenant": "t1"}, dry_run=True) == 4
        assert len(store.get_many([f"u1-{i}" for i in range(4)])) == 4  # dry run: untouched
        assert store.forget({"end_user": "u1", "tenant": "t1"}) == 4
        assert store.get_many([f"u1-{i}" for i in range(4)]) == []
        assert ids_of(store.get_many(["u2-0", "u2-1", "u2-2", "t2-u1", "t1"])) == [
            "u2-0",
            "u2-1",
            "u2-2",
            "t2-u1",
            "t1",
        ]
        assert {h["chunk_id"] for h in store.search(basis(0), top_k=50)} == {
            "u2-0",
            "u2-1",
            "u2-2",
            "t2-u1",
            "t1",
        }
        assert store.forget({"end_user": "u1", "tenant": "t1"}) == 0  # idempotent
        assert store.forget({"end_user": "u1"}) == 1  # the other tenant's u1
        assert store.get("t2-u1") is None

    def test_forget_needs_an_axis(self, store: Any) -> None:
        up(store, [chunk("a", basis(0), USER)], "w")
        with pytest.raises((ValueError, InvalidArguments)):
            store.forget({})
        assert store.get("a") is not None

    def test_forget_takes_expired_chunks_too(self, store: Any, clock: ManualClock) -> None:
        up(store, [chunk("a", basis(0), USER), chunk("b", basis(1), USER)], "w")
        clock.advance(RETENTION + 1)
        assert store.forget({"end_user": "u1"}) == 2
        assert store.sweep_expired() == 0


class AffectForgetConformance:
    """``forget`` on an affect store: every key whose current scope holds the axes goes
    with its whole history; the others stay whole; ``dry_run`` counts only."""

    @pytest.fixture
    def make_store(self) -> AffectStoreFactory:
        raise NotImplementedError("subclass the kit and provide a make_store fixture")

    @pytest.fixture
    def store(self, make_store: AffectStoreFactory) -> Any:
        return make_store()

    def test_forget_erases_keys_with_their_history(self, store: Any) -> None:
        for rev in range(3):
            put(
                store,
                [rec(f"u1-{k}", USER, n=rev) for k in range(4)]
                + [rec(f"u2-{k}", OTHER, n=rev) for k in range(2)]
                + [rec("t2", {"tenant": "t2", "end_user": "u1"}, n=rev)],
                f"p{rev}",
            )
        assert store.forget({"tenant": "t1", "end_user": "u1"}, dry_run=True) == 4
        assert len(store.get_many([f"u1-{k}" for k in range(4)])) == 4
        assert store.forget({"tenant": "t1", "end_user": "u1"}) == 4
        assert store.get_many([f"u1-{k}" for k in range(4)]) == []
        assert store.history("u1-0", limit=10)["items"] == []
        assert len(store.get_many(["u2-0", "u2-1", "t2"])) == 3
        assert len(store.history("u2-0", limit=10)["items"]) == 3
        assert store.forget({"tenant": "t1", "end_user": "u1"}) == 0
        assert store.forget({"end_user": "u1"}) == 1
        # A key whose scope moved out of the axes is not forgotten by its old scope.
        put(store, [rec("moved", USER, n=0)], "m0")
        put(store, [rec("moved", OTHER, n=1)], "m1")
        assert store.forget({"end_user": "u1"}) == 0
        assert store.get_many(["moved"])[0]["scope"] == OTHER

    def test_forget_needs_an_axis(self, store: Any) -> None:
        with pytest.raises((ValueError, InvalidArguments)):
            store.forget({})
