"""``bifrost.planes``: each plane described once, and the code that reads the table."""

from __future__ import annotations

import inspect
from dataclasses import replace
from typing import Any

import pytest
from starlette.testclient import TestClient

from bifrost.affect import dispatch_affect_call
from bifrost.client import BifrostClient
from bifrost.consumer import (
    ConsumerRegistration,
    build_affect_app,
    build_memory_app,
    build_plane_app,
)
from bifrost.consumer.testing import InMemoryAffectStore, InMemoryMemoryStore
from bifrost.consumer.testing.conformance import outcome
from bifrost.consumer.testing.support import DIM, KEY, chunk
from bifrost.context import DispatchContext
from bifrost.envelope import WIRE_VERSION
from bifrost.errors import BifrostError
from bifrost.memory import dispatch_memory_call
from bifrost.planes import AFFECT_PLANE, MEMORY_PLANE, PLANE_SPECS, WIRE_PLANES, plane_spec
from bifrost.reference_server import JwtVerifier


def test_the_table_names_the_two_wire_planes() -> None:
    assert WIRE_PLANES == ("memory", "affect")
    assert PLANE_SPECS == {"memory": MEMORY_PLANE, "affect": AFFECT_PLANE}
    assert (MEMORY_PLANE.route, AFFECT_PLANE.route) == (
        "/bifrost/memory-call",
        "/bifrost/affect-call",
    )
    assert (MEMORY_PLANE.id_arg, MEMORY_PLANE.ids_arg, MEMORY_PLANE.write_verb) == (
        "chunk_id",
        "ids",
        "upsert_many",
    )
    assert (AFFECT_PLANE.id_arg, AFFECT_PLANE.ids_arg, AFFECT_PLANE.write_verb) == (
        "key",
        "keys",
        "put_many",
    )
    assert "mark_invalid" in MEMORY_PLANE.gated_verbs and not AFFECT_PLANE.gated_verbs
    assert "scan" not in MEMORY_PLANE.gated_verbs and "scan" in MEMORY_PLANE.verb_names


@pytest.mark.parametrize("name", ["vmp", "", None, 3, "Memory"])
def test_an_unknown_plane_is_refused_by_name(name: object) -> None:
    with pytest.raises(ValueError, match=r"^plane must be memory or affect$"):
        plane_spec(name)


def test_the_table_and_the_spec_agree_on_verbs_and_ids() -> None:
    for spec in PLANE_SPECS.values():
        assert spec.write_verb in spec.verbs
        assert {"describe_store", "health", "get", "get_many", "delete_many"} <= set(spec.verbs)
        assert spec.verbs["get"].required == {spec.id_arg}
        assert spec.verbs["get_many"].required == {spec.ids_arg}
        assert spec.verbs["delete_many"].required == {spec.ids_arg}
        assert not set(spec.gated_verbs) & set(spec.verbs)


def test_a_spec_whose_verb_table_names_no_ids_or_write_is_refused() -> None:
    verbs = dict(AFFECT_PLANE.verbs)
    with pytest.raises(ValueError, match="get_many must take one argument"):
        replace(AFFECT_PLANE, verbs={v: s for v, s in verbs.items() if v != "get_many"})
    with pytest.raises(ValueError, match="one verb taking records"):
        replace(AFFECT_PLANE, verbs={**verbs, "append": verbs["put_many"]})


_ENVELOPES = [
    ("get", {"chunk_id": "absent"}),
    ("get", {"key": "absent"}),
    ("get_many", {"ids": ["a", "a"]}),
    ("mark_invalid", {"ids": ["a"]}),
    ("no_such_verb", {}),
    ("put_many", {"records": []}),
    ("upsert_many", {"records": "x"}),
]


@pytest.mark.parametrize(("verb", "args"), _ENVELOPES)
def test_the_specs_dispatch_is_the_planes_own(verb: str, args: dict[str, object]) -> None:
    env = {"wire_version": WIRE_VERSION, "call_id": "c", "verb": verb, "args": args}
    for spec, own, store in (
        (MEMORY_PLANE, dispatch_memory_call, InMemoryMemoryStore(DIM)),
        (AFFECT_PLANE, dispatch_affect_call, InMemoryAffectStore()),
    ):
        ctx = DispatchContext(actor="a", plane=spec.name)
        assert _answer(spec.dispatch, store, env, ctx) == _answer(own, store, env, ctx)


def _answer(dispatch: Any, store: object, env: dict[str, Any], ctx: DispatchContext) -> object:
    try:
        return dispatch(store, env, ctx)
    except BifrostError as exc:
        return (type(exc), str(exc))


@pytest.mark.parametrize(
    ("name", "store"),
    [("memory", InMemoryMemoryStore(DIM)), ("affect", InMemoryAffectStore())],
)
def test_one_builder_serves_each_plane_of_the_table(name: str, store: object) -> None:
    plane = plane_spec(name)
    app = build_plane_app(plane, store, JwtVerifier(KEY), ConsumerRegistration())
    assert app.state.bifrost_plane == plane.name
    with TestClient(app) as http:
        client = BifrostClient("", KEY, actor="a", plane=plane.name, http_client=http)
        shake = client.handshake()
        assert shake["plane"] == plane.name
        assert shake["verbs"] == list(plane.verbs)
        assert client.get("absent") is None
        assert client.get_many(["absent"]) == []


@pytest.mark.parametrize(
    ("builder", "store"),
    [(build_memory_app, InMemoryMemoryStore(DIM)), (build_affect_app, InMemoryAffectStore())],
)
def test_each_planes_builder_is_the_one_builder_with_its_spec_filled_in(
    builder: Any, store: object
) -> None:
    spec = MEMORY_PLANE if builder is build_memory_app else AFFECT_PLANE
    assert builder.__name__ == f"build_{spec.name}_app"
    params = list(inspect.signature(builder).parameters.values())
    whole = list(inspect.signature(build_plane_app).parameters.values())
    assert params[0].name == "store" and params[0].annotation == spec.protocol.__name__
    assert params[1:] == whole[2:]
    app = builder(store, JwtVerifier(KEY), ConsumerRegistration(), maintenance_store="m")
    assert (app.state.bifrost_plane, app.state.bifrost_store) == (spec.name, store)
    assert app.state.bifrost_maintenance_store == "m"


def test_the_builder_checks_store_registration_and_verifier() -> None:
    verifier, registration = JwtVerifier(KEY), ConsumerRegistration()
    with pytest.raises(TypeError, match="build_affect_app requires a store"):
        build_plane_app(AFFECT_PLANE, None, verifier, registration)  # type: ignore[misc]
    with pytest.raises(TypeError, match="does not implement AffectDataStore"):
        build_plane_app(AFFECT_PLANE, InMemoryMemoryStore(DIM), verifier, registration)  # type: ignore[misc]
    with pytest.raises(ValueError, match="does not declare the affect plane"):
        build_plane_app(
            AFFECT_PLANE,
            InMemoryAffectStore(),
            verifier,
            ConsumerRegistration(planes=("memory",)),
        )
    with pytest.raises(TypeError, match="check_headers"):
        build_plane_app(AFFECT_PLANE, InMemoryAffectStore(), object(), registration)  # type: ignore[arg-type]


def test_registration_draws_planes_from_the_table() -> None:
    assert ConsumerRegistration().planes == WIRE_PLANES
    with pytest.raises(ValueError, match=r"^planes must be drawn from memory, affect$"):
        ConsumerRegistration(planes=("memory", "vmp"))


def test_parity_dispatches_by_the_plane_of_the_context() -> None:
    env = {"wire_version": WIRE_VERSION, "call_id": "c", "verb": "get", "args": {"key": "k"}}
    affect = outcome(InMemoryAffectStore(), env, DispatchContext(actor="a", plane="affect"))
    assert affect == {"ok": True, "result": None}
    memory = outcome(InMemoryMemoryStore(DIM), env, DispatchContext(actor="a", plane="memory"))
    assert memory["ok"] is False and memory["code"] == "memory.invalid_arguments"
    with pytest.raises(ValueError, match="plane must be"):
        outcome(InMemoryAffectStore(), env, DispatchContext(actor="a", plane="vmp"))


def test_client_addresses_records_by_the_planes_argument_names() -> None:
    store = InMemoryMemoryStore(DIM)
    app = build_plane_app(MEMORY_PLANE, store, JwtVerifier(KEY), ConsumerRegistration())
    with TestClient(app) as http:
        client = BifrostClient("", KEY, actor="a", plane="memory", http_client=http)
        client.upsert_many([chunk("c1", 0)])
        assert client.get("c1")["id"] == "c1"
        assert [r["id"] for r in client.get_many(["c1", "c2"])] == ["c1"]
        assert client.delete_many(["c1"]) == {"deleted": 1}
