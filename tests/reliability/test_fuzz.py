"""Hypothesis fuzzers: envelopes against ``dispatch_memory_call`` and
``dispatch_affect_call`` over the real SQLite stores, and bodies against the VMP app
over a real SQLite store. The only outcomes allowed are a success (whose result is
JSON the app can send, and which never reaches outside the grant) or a documented
error code — never a 500 — and an error leaves every table exactly as it was.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from bifrost.affect import dispatch_affect_call
from bifrost.context import DispatchContext
from bifrost.errors import BifrostError, render_error
from bifrost.memory import dispatch_memory_call
from bifrost.scope import inside_grant
from ratatoskr.affect import open_affect_store
from ratatoskr.memory import open_memory_store
from ratatoskr.vmp import build_vmp_app, open_vmp_store

from .fuzzing import ACTORS, affect_args, envelopes, grants, json_values, memory_args
from .support import dump_conn, report, size

DIM = 4
VMP_DIM = 4
KEY = "fuzz-key"


def documented(plane: str) -> set[tuple[int, str]]:
    return {
        (400, "bifrost.malformed_envelope"),
        (400, "bifrost.unsupported_wire_version"),
        (400, "bifrost.unknown_verb"),
        (403, "bifrost.forbidden"),
        (501, f"{plane}.unsupported_verb"),
        (400, f"{plane}.invalid_arguments"),
        (400, f"{plane}.invalid_filter"),
        (409, f"{plane}.idempotency_conflict"),
        (409, f"{plane}.revision_mismatch"),
    }


def fuzz_settings(soaking: bool, name: str) -> settings:
    return settings(
        max_examples=size(f"fuzz_{name}_examples", 150, 4000, soaking=soaking),
        deadline=None,
        derandomize=not soaking,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
    )


def _scopes_of(result: Any, verb: str) -> list[Any]:
    """The scopes of every record a successful read handed back."""
    if verb == "search":
        return [row["chunk"].get("scope") for row in result]
    if verb in ("get",) and result is not None:
        return [result.get("scope")]
    if verb == "get_many":
        return [r.get("scope") for r in result]
    if verb in ("history", "list"):
        return [r.get("scope") for r in result["items"]]
    return []


def run_dispatch_fuzz(
    plane: str, store: Any, dispatch: Callable[..., Any], args: Any, *, soaking: bool
) -> Counter[str]:
    allowed = documented(plane)
    outcomes: Counter[str] = Counter()

    def snapshot() -> dict[str, list[str]]:
        with store.database.read() as conn:
            return dump_conn(conn)

    @fuzz_settings(soaking, plane)
    @given(env=envelopes(args), grant=grants, actor=st.sampled_from(ACTORS))
    def check(env: dict[str, Any], grant: dict[str, str], actor: str) -> None:
        ctx = DispatchContext(actor=actor, scope=dict(grant), plane=plane, verb=str(env["verb"]))
        before = snapshot()
        error: BifrostError | None = None
        try:
            result = dispatch(store, env, ctx)
        except BifrostError as exc:
            error = exc
        except Exception as exc:  # would be a 500
            raise AssertionError(f"undocumented failure {type(exc).__name__}: {exc}") from exc
        if error is not None:
            status, body = render_error(error, plane=plane, call_id="fuzz")
            code = body["error"]["code"]
            assert (status, code) in allowed, (status, code, error.message)
            assert snapshot() == before, f"{code} left a partial write"
            outcomes[code] += 1
            return
        json.dumps(result, allow_nan=False)  # what the app must be able to send
        for scope in _scopes_of(result, env["verb"]):
            assert isinstance(scope, dict) and inside_grant(scope, grant)
        outcomes["ok"] += 1

    check()
    return outcomes


def _memory_invariants(store: Any) -> None:
    with store.database.read() as conn:
        chunks = conn.execute("SELECT count(*) FROM memory_chunks").fetchall()[0][0]
        vecs = conn.execute("SELECT count(*) FROM memory_vec").fetchall()[0][0]
    assert chunks == vecs


def _memory(tmp_path: Path, soaking: bool) -> None:
    store = open_memory_store(str(tmp_path / "memory.db"), embedding_dim=DIM)
    try:
        outcomes = run_dispatch_fuzz(
            "memory", store, dispatch_memory_call, memory_args(DIM), soaking=soaking
        )
        _memory_invariants(store)
    finally:
        store.close()
    report(f"fuzz-memory{'-soak' if soaking else ''}", dict(outcomes))
    assert outcomes["ok"] > 0


def _affect(tmp_path: Path, soaking: bool) -> None:
    store = open_affect_store(str(tmp_path / "affect.db"))
    try:
        outcomes = run_dispatch_fuzz(
            "affect", store, dispatch_affect_call, affect_args, soaking=soaking
        )
    finally:
        store.close()
    report(f"fuzz-affect{'-soak' if soaking else ''}", dict(outcomes))
    assert outcomes["ok"] > 0


@pytest.mark.slow
def test_fuzz_memory_dispatch(tmp_path: Path) -> None:
    _memory(tmp_path, soaking=False)


@pytest.mark.slow
def test_fuzz_affect_dispatch(tmp_path: Path) -> None:
    _affect(tmp_path, soaking=False)


# -- VMP bodies against its app ---------------------------------------------------------

VMP_DOCUMENTED = {
    (400, "INVALID_ARGUMENT"),
    (400, "DIM_MISMATCH"),
    (404, "NOT_FOUND"),
    (405, "INVALID_ARGUMENT"),
    (507, "CAPACITY_EXCEEDED"),
}
ROUTES = [
    ("POST", "/v1/memory/upsert_vector"),
    ("POST", "/v1/memory/upsert"),
    ("POST", "/v1/memory/search_vector"),
    ("POST", "/v1/memory/search"),
    ("POST", "/v1/memory/meta/set"),
    ("GET", "/v1/memory/meta/get"),
    ("POST", "/v1/snapshot/upload"),
    ("GET", "/v1/snapshot/download"),
    ("GET", "/v1/proof/state"),
    ("GET", "/health"),
    ("POST", "/health"),
    ("GET", "/v1/memory/upsert_vector"),
    ("POST", "/v1/nope"),
]
q16 = st.one_of(
    st.floats(min_value=-40000, max_value=40000, allow_nan=False),
    st.sampled_from([32767.99, 32767.999, -32768.0, -32768.01, 0.0, -0.0, 5e-324, 1e308]),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.booleans(),
    st.text(max_size=2),
)
in_range = st.floats(min_value=-32768, max_value=32767.99, allow_nan=False)
vectors = st.one_of(
    st.lists(in_range, min_size=VMP_DIM, max_size=VMP_DIM),
    st.lists(in_range, min_size=VMP_DIM, max_size=VMP_DIM),
    st.lists(q16, min_size=VMP_DIM, max_size=VMP_DIM),
    st.lists(q16, min_size=VMP_DIM, max_size=VMP_DIM),
    st.lists(q16, max_size=VMP_DIM + 2),
    json_values,
)
targets = st.one_of(
    st.sampled_from(["rec:0", "rec:1", "node:0", "node:1", "node:2", "rec:01", "doc:3"]),
    st.sampled_from(["rec:-1", "rec:4294967296", "node:99999999999", "rec:", ""]),
    st.text(max_size=8),
    json_values,
)


def _field(name: str, strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional={name: strategy})


vmp_bodies = st.one_of(
    st.fixed_dictionaries(
        {"vector": vectors},
        optional={
            "attach_to_document_node": st.one_of(
                st.none(), st.integers(-2, 6), st.sampled_from([2**32, 2**32 - 1, True, 1.0])
            ),
            "tags": st.one_of(st.none(), st.lists(st.text(max_size=4), max_size=3), json_values),
            "metadata": json_values,
        },
    ),
    st.fixed_dictionaries(
        {"query_vector": vectors, "k": st.one_of(st.integers(-1, 1002), json_values)}
    ),
    st.fixed_dictionaries({"target_id": targets, "metadata": json_values}),
    st.dictionaries(st.text(max_size=6), json_values, max_size=3),
    json_values,
).flatmap(
    lambda body: _field("extra", json_values).map(
        lambda extra: {**body, **extra} if isinstance(body, dict) and extra else body
    )
)


def _mutate(blob: bytes, where: int, how: int) -> bytes:
    if not blob:
        return blob
    i = where % len(blob)
    if how == 0:
        return blob[:i]
    if how == 1:
        return blob[:i] + bytes([blob[i] ^ 0x01]) + blob[i + 1 :]
    if how == 2:
        return blob + b"\x00"
    return blob


def _vmp(tmp_path: Path, soaking: bool) -> None:
    store = open_vmp_store(str(tmp_path / "vmp.db"), dim=VMP_DIM, max_records=12)
    app = build_vmp_app(store, api_key=KEY)
    outcomes: Counter[str] = Counter()
    auth = {"Authorization": f"Bearer {KEY}"}
    with TestClient(app, raise_server_exceptions=False) as client:
        for i in range(3):  # something to attach to, search and snapshot
            client.post("/v1/memory/upsert_vector", json={"vector": [i, 1, 2, 3]}, headers=auth)

        def state() -> tuple[str, int]:
            return store.state_hash(), store.record_count()

        @fuzz_settings(soaking, "vmp")
        @given(
            route=st.sampled_from(ROUTES),
            body=vmp_bodies,
            raw=st.one_of(st.none(), st.binary(max_size=64)),
            mutation=st.one_of(st.none(), st.tuples(st.integers(0, 10**6), st.integers(0, 3))),
        )
        def check(
            route: tuple[str, str],
            body: Any,
            raw: bytes | None,
            mutation: tuple[int, int] | None,
        ) -> None:
            method, path = route
            before = state()
            if path == "/v1/snapshot/upload":
                blob = raw if raw is not None else store.snapshot()
                if mutation is not None:
                    blob = _mutate(blob, *mutation)
                upload = {**auth, "Content-Type": "application/octet-stream"}
                response = client.post(path, content=blob, headers=upload)
            elif path == "/v1/memory/meta/get":
                target = body.get("target_id") if isinstance(body, dict) else body
                params = {"target_id": target if isinstance(target, str) else json.dumps(target)}
                response = client.get(path, params=params, headers=auth)
            elif method == "GET":
                response = client.get(path, headers=auth)
            else:
                content = raw if raw is not None else json.dumps(body, allow_nan=False).encode()
                as_json = {**auth, "Content-Type": "application/json"}
                response = client.post(path, content=content, headers=as_json)
            status = response.status_code
            if status == 200:
                outcomes["200"] += 1
                return
            code = response.json().get("code")
            assert (status, code) in VMP_DOCUMENTED, (method, path, status, response.text)
            assert state() == before, f"{status} {code} changed the state"
            outcomes[f"{status} {code}"] += 1

        check()
    store.close()
    report(f"fuzz-vmp{'-soak' if soaking else ''}", dict(outcomes))
    assert outcomes["200"] > 0


def test_fuzz_vmp_app(tmp_path: Path) -> None:
    _vmp(tmp_path, soaking=False)


@pytest.mark.soak
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("plane", ["memory", "affect", "vmp"])
def test_fuzz_soak(tmp_path: Path, plane: str) -> None:
    {"memory": _memory, "affect": _affect, "vmp": _vmp}[plane](tmp_path, True)
