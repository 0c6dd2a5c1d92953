"""The affect store's verbs against a database in memory and on disk."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from typing import Any

import pytest

from bifrost.affect import (
    AFFECT_CAPABILITIES,
    AffectDataStore,
    IdempotencyConflict,
    InvalidArguments,
    RevisionMismatch,
)
from bifrost.context import DispatchContext
from bifrost.limits import InvalidLimits
from bifrost.scope import matches_scope
from ratatoskr.affect import RatatoskrAffectStore, open_affect_store
from ratatoskr.affect.listing import load_record
from ratatoskr.affect.postgres import PostgresAffectStore
from ratatoskr.affect.schema import MIGRATIONS
from ratatoskr.sqlite import StorageUnavailable

from .conftest import FakeClock, rec, strip

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def put(
    store: RatatoskrAffectStore,
    records: list[dict[str, Any]],
    key: str,
    *,
    actor: str = "agent-1",
    **kw: Any,
) -> dict[str, Any]:
    return store.put_many(records, idempotency_key=key, ctx=DispatchContext(actor=actor), **kw)


def test_implements_the_protocol_and_describes_itself(store: RatatoskrAffectStore) -> None:
    assert isinstance(store, AffectDataStore)
    assert store.describe_store() == AFFECT_CAPABILITIES
    assert store.describe_store() == {
        "history_supported": True,
        "optimistic_locking_supported": True,
        "transaction_supported": False,
        "filterable_metadata_fields": [],
    }
    assert store.health() == {"status": "ok", "plane": "affect", "max_batch": 1000, "max_page": 500}


def test_first_write_is_revision_1_and_each_write_adds_one(store: RatatoskrAffectStore) -> None:
    assert store.get("a") is None
    assert put(store, [rec("a", mood=0)], "k1") == {"written": 1, "replayed": False}
    first = store.get("a")
    assert first is not None and first["revision"] == 1 and first["mood"] == 0
    assert RFC3339.match(first["recorded_at"])
    for n in range(2, 6):
        put(store, [rec("a", mood=n), rec(f"other-{n}")], f"k{n}")
        got = store.get("a")
        assert got is not None and got["revision"] == n and got["mood"] == n
        assert got["recorded_at"] > first["recorded_at"]
    assert [r["revision"] for r in store.history("a")["items"]] == [5, 4, 3, 2, 1]


def test_recorded_at_comes_from_the_injected_clock(db_file: str) -> None:
    s = open_affect_store(db_file, clock=lambda: 1_700_000_000.25)
    put(s, [rec("a")], "k")
    got = s.get("a")
    assert got is not None and got["recorded_at"] == "2023-11-14T22:13:20.250000Z"
    s.close()


def test_records_come_back_verbatim(store: RatatoskrAffectStore) -> None:
    payload = rec(
        "ключ/α",
        scope={"tenant": "t1", "end_user": "ü"},
        valence=-0.1,
        arousal=1e-300,
        big=2**62,
        nothing=None,
        nested={"a": [1, 2.5, {"b": []}], "": {}, "emoji": "🙂"},
        flag=False,
    )
    put(store, [payload], "k")
    got = store.get("ключ/α")
    assert got is not None
    assert strip(got) == payload
    assert store.get_many(["ключ/α"])[0] == got
    assert strip(store.history("ключ/α")["items"][0]) == payload
    assert strip(store.list()["items"][0]) == payload


def test_numbers_come_back_with_their_types(store: RatatoskrAffectStore) -> None:
    # 2**70 == float(2**70) in Python: equality alone would not see an int read back
    # as a float (orjson reads integers beyond 64 bits so).
    numbers: dict[str, Any] = {
        "huge": 2**70,
        "negative": -(2**65),
        "below_int64": -(2**63) - 1,  # 19 digits
        "int64": 2**63 - 1,
        "uint64": 2**64 - 1,
        "big_float": 1e300,
    }
    payload = {**rec("n"), **numbers, "nested": [{"x": 2**80}, 0.5, -0.0], "digits": "1" * 40}
    put(store, [payload], "k")
    for got in (
        store.get("n"),
        store.get_many(["n"])[0],
        store.history("n")["items"][0],
        store.list()["items"][0],
    ):
        assert got is not None and strip(got) == payload
        assert [type(got[k]) for k in numbers] == [int, int, int, int, int, float]
        assert type(got["nested"][0]["x"]) is int and str(got["nested"][2]) == "-0.0"


def test_plain_records_are_read_by_orjson_and_others_exactly() -> None:
    assert load_record('{"a":12345678901234567,"b":"x"}') == {"a": 12345678901234567, "b": "x"}
    for text in ('{"a":-9223372036854775809}', '{"a":[184467440737095516150]}'):
        (value,) = load_record(text).values()
        assert value == json.loads(text)["a"] and type(value) is type(json.loads(text)["a"])


def test_empty_batch_writes_nothing(store: RatatoskrAffectStore) -> None:
    assert put(store, [], "k") == {"written": 0, "replayed": False}
    assert put(store, [], "k") == {"written": 0, "replayed": True}
    assert store.list()["items"] == []


class TestIdempotency:
    def test_replay_returns_the_first_result_and_writes_nothing(
        self, store: RatatoskrAffectStore
    ) -> None:
        batch = [rec("a"), rec("b")]
        assert put(store, batch, "same") == {"written": 2, "replayed": False}
        before = store.dump()
        assert put(store, batch, "same") == {"written": 2, "replayed": True}
        assert store.dump() == before
        got = store.get("a")
        assert got is not None and got["revision"] == 1

    def test_same_key_other_payload_conflicts(self, store: RatatoskrAffectStore) -> None:
        put(store, [rec("a", mood=1)], "same")
        before = store.dump()
        with pytest.raises(IdempotencyConflict):
            put(store, [rec("a", mood=2)], "same")
        with pytest.raises(IdempotencyConflict):
            put(store, [rec("a", mood=1)], "same", expected_revisions={"a": 1})
        assert store.dump() == before

    def test_keys_are_scoped_to_the_actor(self, store: RatatoskrAffectStore) -> None:
        put(store, [rec("a", mood=1)], "same", actor="alice")
        # Another actor's identical key is a different request: written, not replayed.
        assert put(store, [rec("a", mood=2)], "same", actor="bob") == {
            "written": 1,
            "replayed": False,
        }
        got = store.get("a")
        assert got is not None and got["revision"] == 2 and got["mood"] == 2
        assert put(store, [rec("a", mood=1)], "same", actor="alice")["replayed"] is True

    def test_expired_entries_are_pruned(
        self, store: RatatoskrAffectStore, clock: FakeClock
    ) -> None:
        for i in range(5):
            put(store, [rec(f"k{i}")], f"e{i}", idempotency_class="ephemeral")
        clock.advance(3600)
        put(store, [rec("x")], "fresh")
        assert [row[0] for row in store.dump()["affect_idempotency"]] == [
            '["default","put_many","agent-1","fresh"]'
        ]


class TestExpectedRevisions:
    def test_a_mismatch_rolls_back_the_whole_batch(self, store: RatatoskrAffectStore) -> None:
        put(store, [rec("a"), rec("b")], "k1")
        before = store.dump()
        with pytest.raises(RevisionMismatch) as err:
            put(
                store,
                [rec("new"), rec("a", mood=5), rec("b", mood=5)],
                "k2",
                expected_revisions={"a": 1, "b": 7},
            )
        assert err.value.details == {"id": "b", "expected": 7, "actual": 1}
        assert store.dump() == before
        assert store.get("new") is None
        # The failed call left no ledger entry: the same key may be retried.
        put(store, [rec("new"), rec("a")], "k2", expected_revisions={"a": 1})
        assert [r["revision"] for r in store.get_many(["new", "a", "b"])] == [1, 2, 1]


class TestHistory:
    def test_newest_first_with_keyset_pages(self, store: RatatoskrAffectStore) -> None:
        for n in range(1, 8):
            put(store, [rec("a", n=n)], f"k{n}")
        first = store.history("a", limit=3)
        assert [r["revision"] for r in first["items"]] == [7, 6, 5]
        assert [r["n"] for r in first["items"]] == [7, 6, 5]
        assert first["next_before_revision"] == 5
        second = store.history("a", limit=3, before_revision=5)
        assert [r["revision"] for r in second["items"]] == [4, 3, 2]
        last = store.history("a", limit=3, before_revision=2)
        assert [r["revision"] for r in last["items"]] == [1]
        assert last["next_before_revision"] is None
        exact = store.history("a", limit=7)
        assert len(exact["items"]) == 7 and exact["next_before_revision"] is None
        assert store.history("a", before_revision=1) == {"items": [], "next_before_revision": None}
        assert store.history("nope") == {"items": [], "next_before_revision": None}

    def test_each_revision_keeps_its_own_record_and_stamp(
        self, store: RatatoskrAffectStore
    ) -> None:
        put(store, [rec("a", scope={"tenant": "t1"}, n=1)], "k1")
        put(store, [rec("a", scope={"tenant": "t2"}, n=2)], "k2")
        newer, older = store.history("a")["items"]
        assert (newer["n"], newer["scope"], older["n"], older["scope"]) == (
            2,
            {"tenant": "t2"},
            1,
            {"tenant": "t1"},
        )
        assert newer["recorded_at"] > older["recorded_at"]
        assert store.get("a") == newer

    def test_paging_is_stable_while_a_writer_adds_revisions(self, db_file: str) -> None:
        s = open_affect_store(db_file)
        for n in range(1, 41):
            put(s, [rec("a", n=n)], f"seed{n}")
        stop = threading.Event()
        written: list[int] = []

        def writer() -> None:
            n = 0
            while not stop.is_set():
                n += 1
                put(s, [rec("a", n=1000 + n)], f"live{n}")
                written.append(n)

        t = threading.Thread(target=writer)
        t.start()
        try:
            seen: list[int] = []
            page = s.history("a", limit=4)
            head = page["items"][0]["revision"]
            while True:
                seen += [r["revision"] for r in page["items"]]
                cursor = page["next_before_revision"]
                if cursor is None:
                    break
                while len(written) < len(seen) // 4 + 1:  # let the writer land one between pages
                    time.sleep(0.001)
                page = s.history("a", limit=4, before_revision=cursor)
        finally:
            stop.set()
            t.join()
        assert seen == list(range(head, 0, -1))  # no duplicate, no gap, newest first
        final = s.history("a", limit=1)["items"][0]["revision"]
        assert final == 40 + len(written) > head
        s.close()


class TestList:
    def seed(self, store: RatatoskrAffectStore) -> dict[str, dict[str, str]]:
        scopes: dict[str, dict[str, str]] = {}
        for i in range(60):
            scope = {"tenant": f"t{i % 2}"}
            if i % 3:
                scope["end_user"] = f"u{i % 5}"
            if i % 7 == 0:
                scope["group"] = "g"
            scopes[f"key-{i:03d}"] = scope
        items = [rec(k, scope=s) for k, s in scopes.items()]
        put(store, items[:30], "a")
        put(store, items[30:], "b")
        return scopes

    def page_through(self, store: RatatoskrAffectStore, limit: int, **filt: Any) -> list[str]:
        keys: list[str] = []
        after = None
        while True:
            page = store.list(limit=limit, after_key=after, **filt)
            assert len(page["items"]) <= limit
            keys += [r["key"] for r in page["items"]]
            after = page["next_after_key"]
            if after is None:
                return keys
            assert after == keys[-1]

    @pytest.mark.parametrize(
        "filt",
        [
            {},
            {"scope_all": {"tenant": "t1"}},
            {"scope_all": {"tenant": "t0", "end_user": "u2"}},
            {"scope_any": [{"end_user": "u1"}, {"group": "g"}]},
            {"scope_all": {"tenant": "t1"}, "scope_any": [{"end_user": "u1"}, {"end_user": "u3"}]},
            {"scope_all": {"tenant": "t1"}, "scope_any": [{"tenant": "t0"}]},
            {"scope_all": {"tenant": "t1"}, "scope_any": [{}]},
            {"scope_any": [{"tenant": "t1", "group": "g"}, {"tenant": "t1"}]},
            {"scope_all": {"agent_self": "nobody"}},
        ],
    )
    @pytest.mark.parametrize("limit", [1, 4, 7, 500])
    def test_pages_to_the_end_without_duplicates_or_gaps(
        self, store: RatatoskrAffectStore, filt: dict[str, Any], limit: int
    ) -> None:
        scopes = self.seed(store)
        want = sorted(
            k
            for k, s in scopes.items()
            if matches_scope(s, filt.get("scope_all"), filt.get("scope_any"))
        )
        assert self.page_through(store, limit, **filt) == want

    def test_items_are_current_records(self, store: RatatoskrAffectStore) -> None:
        put(store, [rec("a", scope={"tenant": "t1"}, n=1)], "k1")
        put(store, [rec("a", scope={"tenant": "t2"}, n=2)], "k2")
        assert store.list(scope_all={"tenant": "t1"})["items"] == []
        (item,) = store.list(scope_all={"tenant": "t2"})["items"]
        assert item == store.get("a") and item["n"] == 2 and item["revision"] == 2

    def test_keys_order_by_code_point(self, store: RatatoskrAffectStore) -> None:
        keys = ["a\x00b", "a", "a\x00", "\U0001f600", "\uffff", "é", "a\x01", "B", "~"]
        put(store, [rec(k, scope={"tenant": "t\x00x"}) for k in keys], "k")
        assert self.page_through(store, 2, scope_all={"tenant": "t\x00x"}) == sorted(keys)
        assert store.list(scope_all={"tenant": "t"})["items"] == []

    def test_paging_is_stable_while_keys_come_and_go(self, store: RatatoskrAffectStore) -> None:
        stable = [f"m{i:03d}" for i in range(0, 200, 2)]
        put(store, [rec(k) for k in stable], "seed")
        collected: list[str] = []
        after = None
        n = 0
        while True:
            page = store.list(scope_all={"tenant": "t1"}, limit=9, after_key=after)
            collected += [r["key"] for r in page["items"]]
            after = page["next_after_key"]
            if after is None:
                break
            # Between pages: insert keys before and after the cursor, delete one
            # transient key, and move one transient key out of scope.
            n += 1
            put(store, [rec(f"m{2 * n - 1:03d}x"), rec(f"a{n}"), rec(f"z{n}")], f"w{n}")
            store.delete_many([f"z{n - 1}"])
            put(store, [rec(f"a{n}", scope={"tenant": "t2"})], f"mv{n}")
        assert len(collected) == len(set(collected))
        assert collected == sorted(collected)
        assert set(stable) <= set(collected)


class TestDelete:
    def test_erases_current_state_and_all_history(self, store: RatatoskrAffectStore) -> None:
        for n in range(3):
            put(store, [rec("a", n=n), rec("b", n=n)], f"k{n}")
        assert store.delete_many(["a", "a", "missing"]) == {"deleted": 1}
        assert store.get("a") is None
        assert store.history("a") == {"items": [], "next_before_revision": None}
        assert store.list()["items"] == [store.get("b")]
        dump = store.dump()
        for table in ("affect_current", "affect_history", "affect_scope"):
            assert all("a" not in row for row in dump[table]), table
        # Written again, the key starts over.
        put(store, [rec("a")], "again")
        got = store.get("a")
        assert got is not None and got["revision"] == 1
        assert len(store.history("a")["items"]) == 1

    def test_counts_distinct_existing_keys(self, store: RatatoskrAffectStore) -> None:
        put(store, [rec("a"), rec("b")], "k")
        assert store.delete_many([]) == {"deleted": 0}
        assert store.delete_many(["b", "a", "b", "c"]) == {"deleted": 2}
        assert store.delete_many(["a"]) == {"deleted": 0}
        assert all(rows == [] for t, rows in store.dump().items() if t != "affect_idempotency")


@pytest.mark.parametrize("field", ["revision", "recorded_at"])
def test_reserved_fields_are_rejected(store: RatatoskrAffectStore, field: str) -> None:
    with pytest.raises(InvalidArguments, match="reserved"):
        put(store, [rec("a"), {**rec("b"), field: 3}], "k")
    assert store.get("a") is None
    assert store.get_many(["a", "b"]) == []


def test_scope_changes_move_the_key_between_list_filters(store: RatatoskrAffectStore) -> None:
    put(store, [rec("a", scope={"tenant": "t1", "end_user": "u"})], "k1")
    put(store, [rec("a", scope={"tenant": "t1", "group": "g"})], "k2")
    assert store.list(scope_all={"end_user": "u"})["items"] == []
    assert [r["key"] for r in store.list(scope_all={"group": "g"})["items"]] == ["a"]
    assert sorted(store.dump()["affect_scope"]) == [("group", "g", "a"), ("tenant", "t1", "a")]


def test_writes_from_many_threads_all_land(db_file: str) -> None:
    s = open_affect_store(db_file)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for n in range(20):
                put(s, [rec("shared", t=t, n=n), rec(f"own-{t}", n=n)], f"t{t}-{n}")
                assert s.get(f"own-{t}") is not None
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    shared = s.get("shared")
    assert shared is not None and shared["revision"] == 80
    revs = [r["revision"] for r in s.history("shared", limit=100)["items"]]
    assert revs == list(range(80, 0, -1))
    s.close()


def test_data_survives_reopening(db_file: str) -> None:
    s = open_affect_store(db_file)
    put(s, [rec("a"), rec("b")], "k1")
    put(s, [rec("a", n=2)], "k2")
    dump = s.dump()
    s.close()
    again = open_affect_store(db_file)
    assert again.dump() == dump
    assert again.database.schema_version() == len(MIGRATIONS)
    assert put(again, [rec("a", n=2)], "k2")["replayed"] is True
    again.close()


def test_closed_store_raises_a_storage_error(db_file: str) -> None:
    s = open_affect_store(db_file)
    s.close()
    s.close()
    with pytest.raises(StorageUnavailable):
        s.get("a")


def test_limits_must_be_positive(db_file: str) -> None:
    with pytest.raises(ValueError, match="positive"):
        open_affect_store(db_file, max_page=0)


@pytest.mark.parametrize("name", ["max_batch", "max_page", "max_scope_any"])
def test_every_affect_store_refuses_a_bad_limit_alike(name: str, db_file: str) -> None:
    bad: dict[str, Any] = {name: 0}
    with pytest.raises(InvalidLimits, match="must be positive"):
        open_affect_store(db_file, **bad)
    no_database: Any = None  # the check runs before the store touches its database
    with pytest.raises(InvalidLimits, match="must be positive"):
        PostgresAffectStore(no_database, **bad)


def test_limits_are_enforced(db_file: str) -> None:
    s = open_affect_store(db_file, max_batch=2, max_page=3)
    assert s.health()["max_batch"] == 2 and s.health()["max_page"] == 3
    with pytest.raises(InvalidArguments):
        put(s, [rec("a"), rec("b"), rec("c")], "k")
    with pytest.raises(InvalidArguments):
        s.list(limit=4)
    with pytest.raises(InvalidArguments):
        s.history("a", limit=4)
    with pytest.raises(InvalidArguments):
        s.get_many(["a", "b", "c"])
    s.close()


def test_a_record_nested_past_orjsons_depth_reads_back(tmp_path: Any) -> None:
    """The standard library writes a record orjson refuses (over 255 levels), and goes
    past orjson's 1024 levels of reading when a caller raised the recursion limit: such
    a record reads back exactly (the exact parse), by get, history and list."""
    deep: Any = 1
    for _ in range(1100):
        deep = [deep]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)
    try:
        store = open_affect_store(str(tmp_path / "affect.db"))
        record = {"key": "deep", "scope": {"tenant": "t"}, "d": deep}
        store.put_many([record], idempotency_key="k", ctx=DispatchContext(actor="a"))
        assert strip(store.get_many(["deep"])[0]) == record
        assert strip(store.history("deep")["items"][0]) == record
        assert [strip(r) for r in store.list()["items"]] == [record]
        store.close()
    finally:
        sys.setrecursionlimit(limit)
