"""Conformance: ``scan`` (memory-plane.md "Beyond v1"): keyset pages in code-point
order of ``chunk_id``, limits, ``include``, the grant, and pagination under
concurrent writes (a record present and unchanged for the whole walk is returned
exactly once)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from bifrost.consumer.testing.conformance._helpers import DIM, basis, chunk, ctx
from bifrost.consumer.testing.conformance.memory_base import (
    MemoryKitBase,
    MemoryStoreFactory,
    up,
)
from bifrost.errors import Forbidden, InvalidArguments
from bifrost.memory.dispatch import dispatch_memory_call, memory_handshake

# Ids whose code-point order differs from a locale's or UTF-16's.
ODD_IDS = ["b", "a", "Z", "é", "a\u0100", "\U0001f600", "\uffff", "a b", "A", "aa", "ä"]


def walk(store: Any, limit: int, **kw: Any) -> list[str]:
    """Every id a full walk of pages of ``limit`` returns, in order."""
    out: list[str] = []
    after: str | None = None
    while True:
        page = store.scan(limit=limit, after_id=after, **kw)
        assert len(page["items"]) <= limit
        out += [r["id"] for r in page["items"]]
        after = page["next_after_id"]
        if after is None:
            return out
        assert after == page["items"][-1]["id"]


class MemoryScanTests(MemoryKitBase):
    def test_scan_pages_in_code_point_order(self, store: Any) -> None:
        recs = [chunk(cid, basis(i), {"tenant": "t"}) for i, cid in enumerate(ODD_IDS)]
        up(store, recs, "k")
        for limit in (1, 2, 3, len(ODD_IDS), 100):
            assert walk(store, limit) == sorted(ODD_IDS)
        page = store.scan()
        assert page["next_after_id"] is None
        assert page["items"] == [store.get(i) for i in sorted(ODD_IDS)]

    def test_scan_include_and_after(self, store: Any) -> None:
        up(store, [chunk("a", basis(0)), chunk("b", basis(1)), chunk("c", basis(2))], "k")
        page = store.scan(limit=1, after_id="a", include={"embedding": False})
        expected = store.get("b")
        assert expected is not None
        del expected["embedding"]
        assert page == {"items": [expected], "next_after_id": "b"}
        assert store.scan(after_id="c") == {"items": [], "next_after_id": None}

    def test_scan_default_limit_is_100(self, store: Any) -> None:
        up(store, [chunk(f"c{i:03d}", basis(i % DIM)) for i in range(101)], "k")
        page = store.scan()
        assert len(page["items"]) == 100 and page["next_after_id"] == "c099"
        assert [r["id"] for r in store.scan(after_id="c099")["items"]] == ["c100"]

    def test_scan_scope(self, store: Any) -> None:
        up(
            store,
            [
                chunk("a", basis(0), {"tenant": "t1", "end_user": "u1"}),
                chunk("b", basis(1), {"tenant": "t2"}),
                chunk("c", basis(2), {"tenant": "t1"}),
                chunk("d", basis(3), {}),
            ],
            "k",
        )

        def ids(**kw: Any) -> list[str]:
            return [r["id"] for r in store.scan(**kw)["items"]]

        assert ids(scope_all={"tenant": "t1"}) == ["a", "c"]
        assert ids(scope_any=[{"tenant": "t2"}, {"end_user": "u1"}]) == ["a", "b"]
        assert ids(scope_all={"tenant": "t1"}, scope_any=[{"tenant": "t2"}]) == []
        assert ids() == ["a", "b", "c", "d"]

    @pytest.mark.parametrize(
        "args",
        [
            {"limit": 0},
            {"limit": 1001},
            {"limit": True},
            {"limit": "5"},
            {"limit": 1.0},
            {"after_id": 5},
            {"after_id": "x" * 600},
            {"include": {"vectors": True}},
            {"scope_all": []},
        ],
    )
    def test_scan_bad_args(self, store: Any, args: dict[str, Any]) -> None:
        with pytest.raises(InvalidArguments):
            store.scan(**args)

    def test_scan_max_page(self, make_store: MemoryStoreFactory) -> None:
        s: Any = make_store(embedding_dim=DIM, max_page=3)
        assert s.health()["max_page"] == 3
        up(s, [chunk(f"c{i}", basis(i)) for i in range(5)], "k")
        assert len(s.scan(limit=3)["items"]) == 3
        assert len(s.scan()["items"]) == 3
        with pytest.raises(InvalidArguments):
            s.scan(limit=4)

    def test_scan_is_advertised(self, store: Any) -> None:
        hs = memory_handshake(
            store, {"wire_version": "0.6", "call_id": "h", "verb": "handshake", "args": {}}, ctx()
        )
        assert "scan" in hs["verbs"]
        assert "max_page" in store.health()

    def test_scan_grant(self, store: Any) -> None:
        up(
            store,
            [
                chunk("a", basis(0), {"tenant": "t1"}),
                chunk("b", basis(1), {"tenant": "t2"}),
                chunk("c", basis(2), {"tenant": "t1", "end_user": "u"}),
            ],
            "k",
        )

        def scan(args: dict[str, Any], grant: dict[str, str]) -> Any:
            envelope = {"wire_version": "0.6", "call_id": "s", "verb": "scan", "args": args}
            return dispatch_memory_call(store, envelope, ctx(scope=grant))

        page = scan({"limit": 1}, {"tenant": "t1"})
        assert [r["id"] for r in page["items"]] == ["a"] and page["next_after_id"] == "a"
        page = scan({"after_id": "a"}, {"tenant": "t1"})
        assert [r["id"] for r in page["items"]] == ["c"] and page["next_after_id"] is None
        page = scan({"scope_any": [{"end_user": "u"}, {"tenant": "t2"}]}, {"tenant": "t1"})
        assert [r["id"] for r in page["items"]] == ["c"]
        with pytest.raises(Forbidden):
            scan({"scope_all": {"tenant": "t2"}}, {"tenant": "t1"})

    def test_scan_stable_under_interleaved_writes(self, store: Any) -> None:
        stable = [f"s{i:03d}" for i in range(0, 60, 2)]
        up(
            store,
            [chunk(cid, basis(i % DIM), {"tenant": "t"}) for i, cid in enumerate(stable)],
            "k",
        )
        seen: list[str] = []
        after: str | None = None
        step = 0
        while True:
            page = store.scan(scope_all={"tenant": "t"}, limit=4, after_id=after)
            seen += [r["id"] for r in page["items"]]
            after = page["next_after_id"]
            if after is None:
                break
            # Between pages: new ids on both sides of the cursor, churn moved out of
            # scope and back, deletes of churn.
            step += 1
            churn = [f"s{i:03d}" for i in range(1, 60, 2)][step % 30 : step % 30 + 3]
            up(store, [chunk(c, basis(step % DIM), {"tenant": "t"}) for c in churn], f"w{step}")
            up(store, [chunk(churn[0], basis(1), {"tenant": "other"})], f"x{step}")
            store.delete_many(churn[1:2])
        for cid in stable:
            assert seen.count(cid) == 1, cid
        assert seen == sorted(seen) and len(set(seen)) == len(seen)

    def test_scan_stable_under_concurrent_writes(self, store: Any) -> None:
        stable = [f"s{i:03d}" for i in range(0, 200, 2)]
        up(
            store,
            [chunk(cid, basis(i % DIM), {"tenant": "t"}) for i, cid in enumerate(stable)],
            "k",
        )
        done = threading.Event()
        errors: list[BaseException] = []

        def writer() -> None:
            n = 0
            try:
                while not done.is_set():
                    n += 1
                    cid = f"s{(2 * n + 1) % 200:03d}"
                    up(store, [chunk(cid, basis(n % DIM), {"tenant": "t"})], f"c{n}")
                    if n % 3 == 0:
                        store.delete_many([cid])
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            for _ in range(3):
                seen = walk(store, 7, scope_all={"tenant": "t"})
                assert all(seen.count(cid) == 1 for cid in stable)
                assert seen == sorted(set(seen))
        finally:
            done.set()
            thread.join()
        assert not errors
