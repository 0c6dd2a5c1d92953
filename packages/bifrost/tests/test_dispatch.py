"""The dispatch skeleton (``bifrost.dispatch``) driven by a verb table of its own: what a
new plane gets by declaring its verbs, without the memory or affect code."""

from __future__ import annotations

from typing import Any

import pytest

from bifrost.context import DispatchContext
from bifrost.dispatch import (
    VerbSpec,
    describe_store_verb,
    dispatch_verb,
    guarded_write,
    health_verb,
    plane_handshake,
    visible_items,
)
from bifrost.envelope import WIRE_VERSION, Envelope
from bifrost.errors import Forbidden, InvalidArguments, UnknownVerb, UnsupportedVerb

GRANT = {"tenant": "t"}


class NoteStore:
    """A store of a hypothetical fourth plane: notes by ``note_id``."""

    def __init__(self) -> None:
        self.notes: dict[str, dict[str, Any]] = {}
        self.writes = 0

    def describe_store(self) -> dict[str, Any]:
        return {"transaction_supported": False}

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "plane": "notes"}

    def get_many(self, ids: list[str]) -> list[dict[str, Any]]:
        return [self.notes[i] for i in ids if i in self.notes]

    def put_notes(self, records: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        self.writes += 1
        self.notes.update({r["note_id"]: r for r in records})
        return {"written": len(records), "idempotency_key": kwargs["idempotency_key"]}


def _note_ids(records: list[dict[str, Any]]) -> list[str]:
    return [str(r["note_id"]) for r in records]


def _put(store: Any, env: Envelope, ctx: DispatchContext) -> Any:
    return guarded_write(store, env, ctx, ids_of=_note_ids, write="put_notes")


def _page(store: Any, env: Envelope, ctx: DispatchContext) -> Any:
    return visible_items({"items": list(store.notes.values())}, ctx.scope)


VERBS = {
    "describe_store": VerbSpec(run=describe_store_verb),
    "health": VerbSpec(run=health_verb),
    "put_notes": VerbSpec(("records", "expected_revisions"), ("records",), run=_put),
    "page": VerbSpec(run=_page),
}


def env(verb: str, key: str | None = None, **args: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"wire_version": WIRE_VERSION, "call_id": "c", "verb": verb}
    out["args"] = args
    if key is not None:
        out["idempotency_key"] = key
    return out


def call(store: NoteStore, envelope: dict[str, Any], grant: dict[str, str] | None = None) -> Any:
    ctx = DispatchContext(actor="a", scope=dict(grant or {}), plane="notes")
    return dispatch_verb(store, envelope, ctx, VERBS, unsupported={"share"})


def note(note_id: str, tenant: str) -> dict[str, Any]:
    return {"note_id": note_id, "scope": {"tenant": tenant}}


def test_the_table_routes_each_verb_to_its_handler() -> None:
    store = NoteStore()
    assert call(store, env("describe_store")) == {"transaction_supported": False}
    assert call(store, env("health")) == {"status": "ok", "plane": "notes"}
    written = call(store, env("put_notes", "k1", records=[note("n1", "t")]))
    assert written == {"written": 1, "idempotency_key": "k1"}
    assert call(store, env("page")) == {"items": [note("n1", "t")]}


def test_unknown_unsupported_and_misnamed_arguments_are_typed_errors() -> None:
    store = NoteStore()
    with pytest.raises(UnknownVerb, match="unknown verb 'nope'"):
        call(store, env("nope"))
    with pytest.raises(UnsupportedVerb, match="share is not supported"):
        call(store, env("share", anything=1))
    with pytest.raises(InvalidArguments, match="put_notes: unknown argument 'extra'"):
        call(store, env("put_notes", "k", records=[], extra=1))
    with pytest.raises(InvalidArguments, match="put_notes: missing argument 'records'"):
        call(store, env("put_notes", "k"))
    assert store.writes == 0


def test_a_write_outside_the_grant_writes_nothing() -> None:
    store = NoteStore()
    call(store, env("put_notes", "k1", records=[note("n1", "other")]))
    with pytest.raises(Forbidden, match="record 0 lies outside"):
        call(store, env("put_notes", "k2", records=[note("n2", "x")]), GRANT)
    with pytest.raises(Forbidden, match="existing record 0 lies outside"):
        call(store, env("put_notes", "k3", records=[note("n1", "t")]), GRANT)
    with pytest.raises(InvalidArguments, match="missing scope"):
        call(store, env("put_notes", "k4", records=[{"note_id": "n3"}]), GRANT)
    assert store.writes == 1 and set(store.notes) == {"n1"}
    assert call(store, env("put_notes", "k5", records=[note("n4", "t")]), GRANT)["written"] == 1


def test_pages_drop_what_the_grant_may_not_see() -> None:
    store = NoteStore()
    call(store, env("put_notes", "k", records=[note("n1", "t"), note("n2", "u")]))
    assert call(store, env("page"), GRANT) == {"items": [note("n1", "t")]}
    assert len(call(store, env("page"))["items"]) == 2


def test_the_handshake_lists_the_table() -> None:
    ctx = DispatchContext(actor="a", plane="notes", consumer_id="c")
    shake = plane_handshake(NoteStore(), env("handshake"), ctx, plane="notes", verbs=VERBS)
    assert shake["plane"] == "notes" and shake["verbs"] == list(VERBS)
    assert shake["capabilities"] == {"transaction_supported": False}
    with pytest.raises(InvalidArguments, match="serves the notes plane"):
        plane_handshake(NoteStore(), env("handshake", plane="memory"), ctx, plane="notes", verbs=())


class ScopedNoteStore(NoteStore):
    """A store that can tell stored scopes without reading records (``scopes_of``)."""

    def get_many(self, ids: list[str]) -> list[dict[str, Any]]:
        raise AssertionError("the grant is decided from the scopes alone")

    def scopes_of(self, ids: list[str]) -> dict[str, dict[str, str]]:
        return {i: dict(self.notes[i]["scope"]) for i in ids if i in self.notes}


def test_the_guard_decides_from_stored_scopes_and_names_the_batch_index() -> None:
    store = ScopedNoteStore()
    store.notes["n1"] = note("n1", "other")
    with pytest.raises(Forbidden, match="existing record 1 lies outside"):
        call(store, env("put_notes", "k1", records=[note("n2", "t"), note("n1", "t")]), GRANT)
    assert store.writes == 0 and set(store.notes) == {"n1"}
    assert call(store, env("put_notes", "k2", records=[note("n2", "t")]), GRANT)["written"] == 1


def test_the_guard_by_get_many_names_the_batch_index_too() -> None:
    store = NoteStore()
    call(store, env("put_notes", "k1", records=[note("n1", "other")]))
    with pytest.raises(Forbidden, match="existing record 2 lies outside"):
        records = [note("n2", "t"), note("n3", "t"), note("n1", "t")]
        call(store, env("put_notes", "k2", records=records), GRANT)
    assert store.writes == 1
