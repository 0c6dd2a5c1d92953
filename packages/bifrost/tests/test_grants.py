"""Scope-grant rules of the wire spec, through the app and through dispatch."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bifrost.affect import dispatch_affect_call
from bifrost.consumer.testing import InMemoryAffectStore, InMemoryMemoryStore
from bifrost.consumer.testing.support import DIM, SpyMemoryStore, Wire, chunk
from bifrost.context import DispatchContext
from bifrost.errors import Forbidden
from bifrost.memory import dispatch_memory_call
from bifrost.scope import inside_grant

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

GRANT = {"tenant": "t1"}


def seed_memory(store: InMemoryMemoryStore) -> None:
    store.upsert_many(
        [
            chunk("mine", 0, {"tenant": "t1", "end_user": "u"}),
            chunk("mine2", 1, {"tenant": "t1"}),
            chunk("theirs", 0, {"tenant": "t2", "end_user": "u"}),
            chunk("global", 0, {}),
        ],
        idempotency_key="seed",
        ctx=DispatchContext(actor="admin"),
    )


def status_code(resp: Any) -> tuple[int, str | None]:
    body = resp.json()
    return resp.status_code, None if body["ok"] else body["error"]["code"]


def test_write_outside_grant_is_403_and_writes_nothing(
    memory_wire: Wire, memory_store: SpyMemoryStore
) -> None:
    recs = [chunk("in", 0, {"tenant": "t1"}), chunk("out", 1, {"tenant": "t2"})]
    resp = memory_wire.call("upsert_many", {"records": recs}, scope=GRANT, idempotency_key="k")
    assert status_code(resp) == (403, "bifrost.forbidden")
    # The store decides the grant itself (in its write); dispatch reads nothing first.
    assert memory_store.calls == ["upsert_many"]
    assert memory_store.get_many(["in", "out"]) == []
    resp = memory_wire.call(
        "upsert_many", {"records": [chunk("bare", 0, {})]}, scope=GRANT, idempotency_key="k2"
    )
    assert status_code(resp) == (403, "bifrost.forbidden")
    assert memory_store.get("bare") is None


def test_write_over_existing_record_outside_grant_is_403(
    memory_wire: Wire, memory_store: SpyMemoryStore
) -> None:
    seed_memory(memory_store)
    memory_store.calls.clear()
    rec = chunk("theirs", 3, {"tenant": "t1"})
    resp = memory_wire.call("upsert_many", {"records": [rec]}, scope=GRANT, idempotency_key="k")
    assert status_code(resp) == (403, "bifrost.forbidden")
    got = memory_store.get("theirs")
    assert got is not None
    assert (got["scope"], got["revision"]) == ({"tenant": "t2", "end_user": "u"}, 1)
    assert memory_store.calls[0] == "upsert_many"


def test_write_inside_grant_ok(memory_wire: Wire, memory_store: SpyMemoryStore) -> None:
    seed_memory(memory_store)
    rec = chunk("mine", 2, {"tenant": "t1", "group": "g"})
    out = memory_wire.ok("upsert_many", {"records": [rec]}, scope=GRANT, idempotency_key="k")
    assert out == {"upserted": 1, "replayed": False}


def test_reads_outside_grant_look_absent(memory_wire: Wire, memory_store: SpyMemoryStore) -> None:
    seed_memory(memory_store)
    assert memory_wire.ok("get", {"chunk_id": "theirs"}, scope=GRANT) is None
    assert memory_wire.ok("get", {"chunk_id": "global"}, scope=GRANT) is None
    assert memory_wire.ok("get", {"chunk_id": "mine"}, scope=GRANT)["id"] == "mine"
    got = memory_wire.ok("get_many", {"ids": ["theirs", "mine", "global", "nope"]}, scope=GRANT)
    assert [r["id"] for r in got] == ["mine"]
    # Unrestricted grant sees everything.
    assert memory_wire.ok("get", {"chunk_id": "theirs"})["id"] == "theirs"


class CountingStore(InMemoryMemoryStore):
    """Counts the record bodies it reads."""

    def __init__(self) -> None:
        super().__init__(DIM)
        self.bodies_read = 0

    def get(self, chunk_id: str) -> dict[str, Any] | None:
        self.bodies_read += 1
        return super().get(chunk_id)

    def get_many(self, ids: list[str]) -> list[dict[str, Any]]:
        self.bodies_read += len(ids)
        return super().get_many(ids)


@pytest.mark.parametrize("verb", ["get", "get_many", "delete_many"])
def test_out_of_grant_ids_are_decided_from_scopes_alone(verb: str) -> None:
    """Visibility is decided before any body is fetched: reading ids that exist in
    another tenant costs what absent ids cost (no timing tells them apart)."""
    store = CountingStore()
    seed_memory(store)
    ctx = DispatchContext(actor="a", scope=GRANT, verb=verb)
    args: dict[str, Any] = (
        {"chunk_id": "theirs"} if verb == "get" else {"ids": ["theirs", "global", "nope"]}
    )
    env = {"wire_version": "0.6", "call_id": "c", "verb": verb, "args": args}
    out = dispatch_memory_call(store, env, ctx)
    assert out in (None, [], {"deleted": 0})
    assert store.bodies_read == 0
    assert len(InMemoryMemoryStore.get_many(store, ["theirs", "global"])) == 2


def test_delete_outside_grant_deletes_and_counts_nothing(
    memory_wire: Wire, memory_store: SpyMemoryStore
) -> None:
    seed_memory(memory_store)
    out = memory_wire.ok("delete_many", {"ids": ["theirs", "global"]}, scope=GRANT)
    assert out == {"deleted": 0}
    assert len(memory_store.get_many(["theirs", "global"])) == 2
    out = memory_wire.ok("delete_many", {"ids": ["theirs", "mine", "nope"]}, scope=GRANT)
    assert out == {"deleted": 1}
    assert memory_store.get("mine") is None
    assert memory_store.get("theirs") is not None


def test_search_ands_the_grant(memory_wire: Wire, memory_store: SpyMemoryStore) -> None:
    seed_memory(memory_store)
    q = chunk("q", 0)["embedding"]
    for args in (
        {},
        {"scope_any": [{"end_user": "u"}]},
        {"scope_any": [{"tenant": "t2"}, {}]},
        {"scope_all": {"end_user": "u"}},
        {"scope_all": {"tenant": "t1"}},
    ):
        rows = memory_wire.ok("search", {"vector": q, "top_k": 10, **args}, scope=GRANT)
        assert rows, args
        assert all(r["chunk"]["scope"]["tenant"] == "t1" for r in rows), args
    resp = memory_wire.call(
        "search", {"vector": q, "top_k": 10, "scope_all": {"tenant": "t2"}}, scope=GRANT
    )
    assert status_code(resp) == (403, "bifrost.forbidden")


AXES = ["tenant", "end_user", "group", "agent_self"]
VALUES = ["a", "b"]
scopes = st.dictionaries(st.sampled_from(AXES), st.sampled_from(VALUES), max_size=3)


@settings(max_examples=80, deadline=None)
@given(
    records=st.lists(scopes, min_size=1, max_size=12),
    grant=scopes,
    scope_all=st.none() | scopes,
    scope_any=st.none() | st.lists(scopes, max_size=3),
)
def test_search_never_leaves_the_grant(
    records: list[dict[str, str]],
    grant: dict[str, str],
    scope_all: dict[str, str] | None,
    scope_any: list[dict[str, str]] | None,
) -> None:
    store = InMemoryMemoryStore(DIM)
    recs = [chunk(f"c{i}", i, s) for i, s in enumerate(records)]
    store.upsert_many(recs, idempotency_key="k", ctx=DispatchContext(actor="x"))
    env = {
        "wire_version": "0.6",
        "call_id": "c",
        "verb": "search",
        "args": {
            "vector": recs[0]["embedding"],
            "top_k": 50,
            "scope_all": scope_all,
            "scope_any": scope_any,
        },
    }
    ctx = DispatchContext(actor="x", scope=grant)
    try:
        rows = dispatch_memory_call(store, env, ctx)
    except Forbidden:
        assert scope_all is not None
        assert any(k in grant and grant[k] != v for k, v in scope_all.items())
        return
    assert all(inside_grant(r["chunk"]["scope"], grant) for r in rows)
    expected = sum(
        1
        for s in records
        if inside_grant(s, grant)
        and all(s.get(k) == v for k, v in (scope_all or {}).items())
        and (not scope_any or any(all(s.get(k) == v for k, v in m.items()) for m in scope_any))
    )
    assert len(rows) == expected


# --- affect --------------------------------------------------------------------------
def seed_affect(store: InMemoryAffectStore) -> None:
    ctx = DispatchContext(actor="admin", plane="affect")
    store.put_many(
        [
            {"key": "mine", "scope": {"tenant": "t1"}, "v": 1},
            {"key": "theirs", "scope": {"tenant": "t2"}, "v": 1},
        ],
        idempotency_key="seed",
        ctx=ctx,
    )
    store.put_many(
        [{"key": "theirs", "scope": {"tenant": "t2"}, "v": 2}], idempotency_key="s2", ctx=ctx
    )


def test_affect_grants(affect_wire: Wire, affect_store: InMemoryAffectStore) -> None:
    seed_affect(affect_store)
    w = affect_wire
    bad = {"records": [{"key": "new", "scope": {"tenant": "t2"}}]}
    assert status_code(w.call("put_many", bad, scope=GRANT, idempotency_key="i")) == (
        403,
        "bifrost.forbidden",
    )
    over = {"records": [{"key": "theirs", "scope": {"tenant": "t1"}}]}
    assert status_code(w.call("put_many", over, scope=GRANT, idempotency_key="i2"))[0] == 403
    assert affect_store.get("new") is None
    theirs = affect_store.get("theirs")
    assert theirs is not None
    assert theirs["revision"] == 2
    assert w.ok("get", {"key": "theirs"}, scope=GRANT) is None
    assert [r["key"] for r in w.ok("get_many", {"keys": ["theirs", "mine"]}, scope=GRANT)] == [
        "mine"
    ]
    empty: dict[str, Any] = {"items": [], "next_before_revision": None}
    assert w.ok("history", {"key": "theirs"}, scope=GRANT) == empty
    assert len(w.ok("history", {"key": "mine"}, scope=GRANT)["items"]) == 1
    assert [r["key"] for r in w.ok("list", {}, scope=GRANT)["items"]] == ["mine"]
    listed = w.ok("list", {"scope_any": [{"tenant": "t2"}, {}]}, scope=GRANT)
    assert [r["key"] for r in listed["items"]] == ["mine"]
    resp = w.call("list", {"scope_all": {"tenant": "t2"}}, scope=GRANT)
    assert status_code(resp) == (403, "bifrost.forbidden")
    assert w.ok("delete_many", {"keys": ["theirs"]}, scope=GRANT) == {"deleted": 0}
    assert affect_store.get("theirs") is not None
    assert w.ok("delete_many", {"keys": ["theirs", "mine"]}, scope=GRANT) == {"deleted": 1}
    ok = {"records": [{"key": "fresh", "scope": {"tenant": "t1", "end_user": "u"}}]}
    assert w.ok("put_many", ok, scope=GRANT, idempotency_key="i3")["written"] == 1


def test_affect_history_drops_revisions_outside_grant(affect_store: InMemoryAffectStore) -> None:
    ctx = DispatchContext(actor="admin", plane="affect")
    affect_store.put_many([{"key": "m", "scope": {"tenant": "t2"}}], idempotency_key="1", ctx=ctx)
    affect_store.put_many([{"key": "m", "scope": {"tenant": "t1"}}], idempotency_key="2", ctx=ctx)
    env = {"wire_version": "0.6", "call_id": "c", "verb": "history", "args": {"key": "m"}}
    page = dispatch_affect_call(affect_store, env, DispatchContext(actor="a", scope=GRANT))
    assert [r["revision"] for r in page["items"]] == [2]
