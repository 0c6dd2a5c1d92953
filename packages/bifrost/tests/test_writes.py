"""The one write path: the request validation returns, the replay-or-conflict
decision, the revision check, and the reference stores' dict ledger."""

from __future__ import annotations

from typing import Any

import pytest

from bifrost.affect.protocol import AffectWrites, affect_health
from bifrost.affect.validation import ValidatedAffect, validate_put
from bifrost.consumer.testing import InMemoryAffectStore, InMemoryMemoryStore
from bifrost.consumer.testing._ledger import PRUNE_PER_WRITE, DictLedger, LedgerEntry
from bifrost.context import DispatchContext
from bifrost.errors import Forbidden, IdempotencyConflict, InvalidArguments, RevisionMismatch
from bifrost.idempotency import idempotency_id, request_digest
from bifrost.limits import check_affect_limits
from bifrost.memory.protocol import MemoryWrites, memory_health
from bifrost.memory.validation import ValidatedChunk, validate_upsert
from bifrost.writes import (
    CONFLICT_MESSAGE,
    WriteRequest,
    check_replaced,
    check_revisions,
    deletable,
    outside_grant,
    record_write,
    replay_or_conflict,
    replay_write,
    under_grant,
    validate_idempotency,
)

CTX = DispatchContext(actor="agent-a")


def chunk(cid: str, x: float = 1.0) -> dict[str, Any]:
    return {"id": cid, "embedding": [x, 0.0], "scope": {"tenant": "t"}}


def upsert(
    records: list[dict[str, Any]], expected: object = None, cls: object = None
) -> WriteRequest[ValidatedChunk]:
    return validate_upsert(records, expected, "key-1", cls, embedding_dim=2, max_batch=10)


def put(records: list[dict[str, Any]], expected: object = None) -> WriteRequest[ValidatedAffect]:
    return validate_put(records, expected, "key-1", "durable", max_batch=10)


# -- the request ----------------------------------------------------------------------


def test_upsert_request_carries_everything_a_write_needs() -> None:
    records = [chunk("a"), chunk("b", 2.0)]
    request = upsert(records, {"b": 3, "a": 0}, "ephemeral")
    assert request.verb == "upsert_many"
    assert request.ids == ("a", "b")
    assert [c.id for c in request] == ["a", "b"]  # a sequence of the validated chunks
    assert len(request) == 2 and request[1].embedding == [2.0, 0.0]
    assert list(request.expected.items()) == [("b", 3), ("a", 0)]  # the order given
    assert request.digest == request_digest(records, {"b": 3, "a": 0})
    assert (request.idempotency_key, request.idempotency_class, request.ttl) == (
        "key-1",
        "ephemeral",
        15 * 60,
    )
    assert request.expires_at(100.0) == 100.0 + 15 * 60
    assert request.result() == {"upserted": 2, "replayed": False}


def test_put_request_carries_everything_a_write_needs() -> None:
    records = [{"key": "k", "scope": {}, "v": 1}]
    request = put(records, {"k": 0})
    assert (request.verb, request.ids, request.expected) == ("put_many", ("k",), {"k": 0})
    assert request.digest == request_digest(records, {"k": 0})
    assert request.ttl == 7 * 24 * 3600
    assert request.result() == {"written": 1, "replayed": False}
    assert request[0].record == {"key": "k", "scope": {}, "v": 1}


def test_ledger_id_is_per_actor_verb_and_key() -> None:
    memory, affect = upsert([chunk("a")]), put([{"key": "a", "scope": {}}])
    assert memory.ledger_id("agent-a") == idempotency_id("upsert_many", "agent-a", "key-1")
    assert affect.ledger_id("agent-a") == idempotency_id("put_many", "agent-a", "key-1")
    assert memory.ledger_id("agent-a") != memory.ledger_id("agent-b")
    assert memory.ledger_id("agent-a") != affect.ledger_id("agent-a")


def test_no_expected_revisions_is_an_empty_expectation() -> None:
    assert upsert([chunk("a")]).expected == {}
    assert upsert([chunk("a")], {}).digest == upsert([chunk("a")]).digest


@pytest.mark.parametrize(
    ("expected", "message"),
    [
        ([], "expected_revisions must be an object or null"),
        ({"zz": 1}, "expected_revisions names an id not in this batch"),
        ({"a": -1}, "expected_revisions values must be integers >= 0"),
        ({"a": True}, "expected_revisions values must be integers >= 0"),
    ],
)
def test_bad_expected_revisions_are_refused_by_both_planes(expected: object, message: str) -> None:
    with pytest.raises(InvalidArguments, match=message):
        upsert([chunk("a")], expected)
    with pytest.raises(InvalidArguments, match=message):
        put([{"key": "a", "scope": {}}], expected)


@pytest.mark.parametrize(
    ("key", "cls", "message"),
    [
        (None, None, "idempotency_key is required"),
        ("", None, "idempotency_key must be a non-empty string"),
        ("k" * 257, None, "longer than 256"),
        ("k", "weekly", "idempotency_class must be one of"),
        ("k", 3, "idempotency_class must be one of"),
    ],
)
def test_validate_idempotency(key: object, cls: object, message: str) -> None:
    with pytest.raises(InvalidArguments, match=message):
        validate_idempotency(key, cls)


def test_validate_idempotency_types_the_class() -> None:
    assert validate_idempotency("k", None) == ("k", None)
    assert validate_idempotency("k", "durable") == ("k", "durable")


# -- replay or conflict, revisions ----------------------------------------------------


def test_replay_or_conflict() -> None:
    request = upsert([chunk("a")])
    assert replay_or_conflict(None, request) is None
    same = LedgerEntry(request.digest, {"upserted": 1, "replayed": False}, 10.0)
    assert replay_or_conflict(same, request) == {"upserted": 1, "replayed": True}
    other = LedgerEntry("0" * 64, {"upserted": 1, "replayed": False}, 10.0)
    with pytest.raises(IdempotencyConflict) as caught:
        replay_or_conflict(other, request)
    assert caught.value.message == CONFLICT_MESSAGE


def test_check_revisions_raises_for_the_first_failing_id_in_order() -> None:
    check_revisions({}, {"a": 4})
    check_revisions({"a": 4, "new": 0}, {"a": 4})
    with pytest.raises(RevisionMismatch) as caught:
        check_revisions({"a": 4, "b": 1, "c": 9}, {"a": 4, "b": 2, "c": 1})
    assert caught.value.details == {"id": "b", "expected": 1, "actual": 2}
    with pytest.raises(RevisionMismatch) as caught:
        check_revisions({"gone": 3}, {})
    assert caught.value.details == {"id": "gone", "expected": 3, "actual": 0}


def test_a_record_outside_the_grant_is_absent_to_the_revision_check() -> None:
    """An expected revision cannot probe another tenant's id: the same 409 as for an
    absent id; only a write that would otherwise go ahead is Forbidden."""
    foreign = {"x": {"tenant": "other"}}
    mine = {"m": {"tenant": "t"}}

    def answer(expected: dict[str, int], scopes: dict[str, dict[str, str]]) -> object:
        request = under_grant(upsert([chunk("x"), chunk("m")], expected), {"tenant": "t"})
        revisions = {rid: 4 for rid in scopes}
        try:
            check_replaced(request, scopes, revisions)
        except (RevisionMismatch, Forbidden) as exc:
            return (type(exc), exc.message, exc.details)
        return None

    for expected in ({"x": 5}, {"x": 4}, {"m": 1}, {"x": 0, "m": 1}):
        assert answer(expected, {**foreign, **mine}) == answer(expected, mine), expected
    assert answer({"x": 4}, mine) == (
        RevisionMismatch,
        "revision mismatch: expected 4, actual 0",
        {"id": "x", "expected": 4, "actual": 0},
    )
    refused: tuple[object, ...] = (
        Forbidden,
        "existing record 0 lies outside the token's scope grant",
        {},
    )
    assert answer({}, {**foreign, **mine}) == refused
    assert answer({"x": 0, "m": 4}, {**foreign, **mine}) == refused
    assert answer({"x": 0, "m": 4}, mine) is None
    assert outside_grant(upsert([chunk("x")]), foreign) == frozenset()  # no grant


def test_deletable_keeps_the_existing_ids_inside_the_grant_in_order() -> None:
    scopes = {"a": {"tenant": "t", "agent_self": "s"}, "b": {"tenant": "u"}, "c": {}}
    ids = ["c", "absent", "b", "a"]
    assert deletable(ids, scopes, {}) == ["c", "b", "a"]
    assert deletable(ids, scopes, {"tenant": "t"}) == ["a"]
    assert deletable(ids, scopes, {"tenant": "t", "agent_self": "x"}) == []


def test_the_conflict_message_is_the_same_in_both_reference_stores() -> None:
    memory, affect = InMemoryMemoryStore(2), InMemoryAffectStore()
    memory.upsert_many([chunk("a")], idempotency_key="k", ctx=CTX)
    affect.put_many([{"key": "a", "scope": {}}], idempotency_key="k", ctx=CTX)
    messages = []
    with pytest.raises(IdempotencyConflict) as caught:
        memory.upsert_many([chunk("b")], idempotency_key="k", ctx=CTX)
    messages.append(caught.value.message)
    with pytest.raises(IdempotencyConflict) as caught:
        affect.put_many([{"key": "b", "scope": {}}], idempotency_key="k", ctx=CTX)
    messages.append(caught.value.message)
    assert messages == [CONFLICT_MESSAGE, CONFLICT_MESSAGE]


# -- the dict ledger ------------------------------------------------------------------


def test_dict_ledger_lookup_record_and_expiry() -> None:
    ledger = DictLedger()
    ledger.record("id", digest="d", result={"n": 1}, expires_at=100.0)
    entry = ledger.lookup("id", now=50.0)
    assert entry is not None and (entry.digest, entry.result) == ("d", {"n": 1})
    assert ledger.lookup("id", now=100.0) is None  # expired at its expiry
    assert ledger.lookup("other", now=0.0) is None
    ledger.record("id", digest="d2", result={"n": 2}, expires_at=300.0)
    entry = ledger.lookup("id", now=150.0)
    assert entry is not None and entry.digest == "d2"


def test_dict_ledger_prunes_expired_entries_oldest_first_and_bounded() -> None:
    ledger = DictLedger()
    for i in range(5):
        ledger.record(f"old{i}", digest="d", result={}, expires_at=10.0 + i)
    ledger.record("live", digest="d", result={}, expires_at=1000.0)
    assert ledger.prune(now=20.0, limit=3) == 3
    assert ledger.lookup("old3", now=0.0) is not None  # the two latest expiries remain
    assert ledger.prune(now=20.0) == 2
    assert ledger.prune(now=20.0) == 0
    assert len(ledger) == 1 and ledger.lookup("live", now=20.0) is not None


def test_dict_ledger_prune_skips_an_entry_replaced_since() -> None:
    ledger = DictLedger()
    ledger.record("id", digest="d1", result={}, expires_at=10.0)
    ledger.record("id", digest="d2", result={}, expires_at=500.0)  # after it expired
    assert ledger.prune(now=20.0) == 0
    entry = ledger.lookup("id", now=20.0)
    assert entry is not None and entry.digest == "d2"


def test_dict_ledger_default_bound() -> None:
    ledger = DictLedger()
    for i in range(PRUNE_PER_WRITE + 6):
        ledger.record(f"k{i}", digest="d", result={}, expires_at=1.0)
    assert ledger.prune(now=2.0) == PRUNE_PER_WRITE
    assert len(ledger) == 6


def test_record_write_prunes_records_and_returns_a_fresh_result() -> None:
    ledger = DictLedger()
    ledger.record("stale", digest="d", result={}, expires_at=1.0)
    request = upsert([chunk("a")], None, "ephemeral")
    assert replay_write(ledger, request, "agent-a", 5.0) is None
    result = record_write(ledger, request, "agent-a", 5.0)
    assert result == {"upserted": 1, "replayed": False}
    assert ledger.lookup("stale", now=0.0) is None  # pruned by the write
    entry = ledger.lookup(request.ledger_id("agent-a"), now=5.0)
    assert entry is not None and entry.digest == request.digest
    result["upserted"] = 99  # the caller's copy, not the ledger's
    assert replay_write(ledger, request, "agent-a", 6.0) == {"upserted": 1, "replayed": True}
    assert replay_write(ledger, request, "agent-b", 6.0) is None  # another actor
    assert replay_write(ledger, request, "agent-a", 5.0 + 15 * 60) is None  # expired


def test_reference_stores_prune_their_ledgers() -> None:
    now = [0.0]
    memory = InMemoryMemoryStore(2, clock=lambda: now[0])
    affect = InMemoryAffectStore(clock=lambda: now[0])
    for i in range(10):
        memory.upsert_many(
            [chunk("a")], idempotency_key=f"k{i}", ctx=CTX, idempotency_class="ephemeral"
        )
        affect.put_many(
            [{"key": "a", "scope": {}}],
            idempotency_key=f"k{i}",
            ctx=CTX,
            idempotency_class="ephemeral",
        )
    now[0] = 3600.0
    memory.upsert_many([chunk("a")], idempotency_key="later", ctx=CTX)
    affect.put_many([{"key": "a", "scope": {}}], idempotency_key="later", ctx=CTX)
    assert len(memory._ledger) == len(affect._ledger) == 1


# -- the store helpers of the protocols -------------------------------------------------


def test_health_helpers_are_what_the_reference_stores_answer() -> None:
    assert memory_health(embedding_dim=2, max_batch=3, max_top_k=4) == {
        "status": "ok",
        "plane": "memory",
        "embedding_dim": 2,
        "distance": "cosine",
        "max_batch": 3,
        "max_top_k": 4,
        "max_page": 1000,
    }
    assert InMemoryMemoryStore(2, max_batch=3, max_top_k=4).health() == memory_health(
        embedding_dim=2, max_batch=3, max_top_k=4
    )
    assert affect_health(max_batch=3, max_page=4) == {
        "status": "ok",
        "plane": "affect",
        "max_batch": 3,
        "max_page": 4,
    }
    assert InMemoryAffectStore(max_batch=3, max_page=4).health() == affect_health(
        max_batch=3, max_page=4
    )


def test_check_affect_limits() -> None:
    check_affect_limits(max_batch=1, max_page=1, max_scope_any=1)
    for bad in ({"max_batch": 0}, {"max_page": 0}, {"max_scope_any": -1}):
        limits = {"max_batch": 1, "max_page": 1, "max_scope_any": 1, **bad}
        with pytest.raises(ValueError, match="must be positive"):
            check_affect_limits(**limits)


def test_a_write_mixin_validates_before_its_store_sees_the_request() -> None:
    seen: list[tuple[WriteRequest[Any], str]] = []

    class Memory(MemoryWrites):
        embedding_dim = 2
        max_batch = 5

        def perform_upsert(
            self, request: WriteRequest[ValidatedChunk], actor: str
        ) -> dict[str, Any]:
            seen.append((request, actor))
            return request.result()

    class Affect(AffectWrites):
        max_batch = 5

        def perform_put(self, request: WriteRequest[ValidatedAffect], actor: str) -> dict[str, Any]:
            seen.append((request, actor))
            return request.result()

    assert Memory().upsert_many([chunk("a")], idempotency_key="k", ctx=CTX) == {
        "upserted": 1,
        "replayed": False,
    }
    assert Affect().put_many(
        [{"key": "a", "scope": {}}], idempotency_key="k", ctx=CTX, expected_revisions={"a": 0}
    ) == {"written": 1, "replayed": False}
    assert [(r.verb, r.ids, r.expected, actor) for r, actor in seen] == [
        ("upsert_many", ("a",), {}, "agent-a"),
        ("put_many", ("a",), {"a": 0}, "agent-a"),
    ]
    with pytest.raises(InvalidArguments, match="records: 6 exceeds max_batch 5 "):
        Affect().put_many(
            [{"key": str(i), "scope": {}} for i in range(6)], idempotency_key="k", ctx=CTX
        )
    with pytest.raises(InvalidArguments, match="record 0: embedding length 1 != 2"):
        Memory().upsert_many(
            [{"id": "a", "embedding": [1.0], "scope": {}}], idempotency_key="k", ctx=CTX
        )
    assert len(seen) == 2  # nothing invalid reached a store
