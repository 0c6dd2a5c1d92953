"""Every route, alias and error code of the VMP plane over HTTP."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from ratatoskr.vmp import VmpStore, build_vmp_app, is_loopback_host, open_vmp_store
from ratatoskr.vmp.fixedpoint import squared_l2, to_fixed_vector

from .conftest import API_KEY, AUTH, DIM, JSON_BODY, SNAPSHOT_BODY, vec


@pytest.fixture
def store() -> Iterator[VmpStore]:
    """HTTP behaviour does not depend on the file: one in-memory store keeps these fast."""
    s = open_vmp_store(":memory:", dim=DIM)
    yield s
    s.close()


UPSERT_ROUTES = ["/v1/memory/upsert_vector", "/v1/memory/upsert"]
SEARCH_ROUTES = ["/v1/memory/search_vector", "/v1/memory/search"]


def state(http: TestClient) -> str:
    response = http.get("/v1/proof/state")
    assert response.status_code == 200
    digest = response.json()["final_state_hash"]
    assert isinstance(digest, str)
    return digest


def assert_error(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code
    assert set(body) == {"error", "code"}
    assert isinstance(body["error"], str) and body["error"]


# -- routes ---------------------------------------------------------------------


@pytest.mark.parametrize("route", UPSERT_ROUTES)
def test_upsert_routes_assign_ids(http: TestClient, route: str) -> None:
    first = http.post(route, json={"vector": vec(1)})
    assert first.status_code == 200
    assert first.json() == {
        "memory_id": "rec:0",
        "record_id": 0,
        "document_node_id": 0,
        "chunk_node_id": 1,
    }
    second = http.post(route, json={"vector": vec(2)}).json()
    assert (second["document_node_id"], second["chunk_node_id"]) == (2, 3)
    attached = http.post(
        route, json={"vector": vec(3), "attach_to_document_node": 2, "tags": ["x"]}
    ).json()
    assert attached == {
        "memory_id": "rec:2",
        "record_id": 2,
        "document_node_id": 2,
        "chunk_node_id": 4,
    }


def test_explicit_nulls_are_accepted(http: TestClient) -> None:
    body = {"vector": vec(1), "attach_to_document_node": None, "tags": None, "metadata": None}
    assert http.post("/v1/memory/upsert_vector", json=body).json()["record_id"] == 0
    assert http.get("/v1/memory/meta/get", params={"target_id": "rec:0"}).json() == {
        "target_id": "rec:0",
        "metadata": None,
    }


@pytest.mark.parametrize("route", SEARCH_ROUTES)
def test_search_routes(http: TestClient, route: str) -> None:
    vectors = [vec(1), vec(2), vec(1)]
    for i, v in enumerate(vectors):
        http.post("/v1/memory/upsert_vector", json={"vector": v, "metadata": {"i": i}})
    response = http.post(route, json={"query_vector": vec(1), "k": 10})
    assert response.status_code == 200
    results = response.json()["results"]
    query = to_fixed_vector(vec(1), DIM)
    exact = sorted(
        (squared_l2(to_fixed_vector(v, DIM), query), rid) for rid, v in enumerate(vectors)
    )
    assert [(r["record_id"], r["score"]) for r in results] == [
        (rid, dist / 2**32) for dist, rid in exact
    ]
    assert results[0] == {"memory_id": "rec:0", "record_id": 0, "score": 0.0, "metadata": {"i": 0}}
    assert results[1]["memory_id"] == "rec:2"
    assert len(http.post(route, json={"query_vector": vec(1), "k": 1}).json()["results"]) == 1


def test_metadata_routes(http: TestClient) -> None:
    http.post("/v1/memory/upsert_vector", json={"vector": vec(1), "metadata": {"a": 1}})
    get = http.get("/v1/memory/meta/get", params={"target_id": "rec:0"})
    assert get.json() == {"target_id": "rec:0", "metadata": {"a": 1}}
    done = http.post("/v1/memory/meta/set", json={"target_id": "node:0", "metadata": {"t": [1]}})
    assert done.status_code == 200
    assert done.json() == {"success": True}
    assert http.get("/v1/memory/meta/get?target_id=node:0").json()["metadata"] == {"t": [1]}
    cleared = http.post("/v1/memory/meta/set", json={"target_id": "rec:0", "metadata": None})
    assert cleared.status_code == 200
    assert http.get("/v1/memory/meta/get?target_id=rec:0").json()["metadata"] is None
    # Unknown ids read as null with 200, whatever their shape.
    for target in ("rec:5", "node:9", "healthcheck"):
        response = http.get("/v1/memory/meta/get", params={"target_id": target})
        assert response.status_code == 200
        assert response.json() == {"target_id": target, "metadata": None}


def test_metadata_with_an_integer_beyond_64_bits_round_trips(http: TestClient) -> None:
    big = 2**80 + 1
    http.post("/v1/memory/upsert_vector", json={"vector": vec(1)})
    body = b'{"target_id": "rec:0", "metadata": {"n": ' + str(big).encode() + b"}}"
    assert http.post("/v1/memory/meta/set", content=body, headers=JSON_BODY).status_code == 200
    got = http.get("/v1/memory/meta/get", params={"target_id": "rec:0"})
    assert got.status_code == 200
    assert json.loads(got.content)["metadata"] == {"n": big}


def test_snapshot_routes_round_trip(http: TestClient, tmp_path: Path) -> None:
    for seed in range(5):
        http.post("/v1/memory/upsert_vector", json={"vector": vec(seed), "tags": [str(seed)]})
    digest = state(http)
    download = http.get("/v1/snapshot/download")
    assert download.status_code == 200
    assert download.headers["content-type"] == "application/octet-stream"
    blob = download.content
    http.post("/v1/memory/upsert_vector", json={"vector": vec(9)})
    assert state(http) != digest
    upload = http.post("/v1/snapshot/upload", content=blob, headers=SNAPSHOT_BODY)
    assert upload.status_code == 200
    assert state(http) == digest
    assert http.get("/v1/snapshot/download").content == blob
    # Into another store, over HTTP.
    with open_vmp_store(str(tmp_path / "other.db"), dim=DIM) as other:
        with TestClient(build_vmp_app(other, api_key="other"), headers=AUTH) as wrong:
            assert wrong.get("/health").status_code == 401
        with TestClient(
            build_vmp_app(other, api_key="other"), headers={"Authorization": "Bearer other"}
        ) as client:
            upload = client.post("/v1/snapshot/upload", content=blob, headers=SNAPSHOT_BODY)
            assert upload.status_code == 200
            assert state(client) == digest


def test_proof_state_is_64_hex(http: TestClient) -> None:
    digest = state(http)
    assert len(digest) == 64
    int(digest, 16)


def test_health(http: TestClient) -> None:
    assert http.get("/health").json() == {"status": "ok", "dim": DIM, "records": 0}
    http.post("/v1/memory/upsert", json={"vector": vec(1)})
    assert http.get("/health").json() == {"status": "ok", "dim": DIM, "records": 1}


# -- errors -----------------------------------------------------------------------


@pytest.mark.parametrize("route", UPSERT_ROUTES)
def test_upsert_dim_mismatch(http: TestClient, route: str) -> None:
    before = state(http)
    for bad in ([1.0] * (DIM - 1), [1.0] * (DIM + 1), []):
        assert_error(http.post(route, json={"vector": bad}), 400, "DIM_MISMATCH")
    assert state(http) == before


@pytest.mark.parametrize("route", SEARCH_ROUTES)
def test_search_dim_mismatch(http: TestClient, route: str) -> None:
    http.post("/v1/memory/upsert_vector", json={"vector": vec(1)})
    for bad in ([1.0] * (DIM - 1), [1.0] * (DIM + 1), []):
        response = http.post(route, json={"query_vector": bad, "k": 1})
        assert_error(response, 400, "DIM_MISMATCH")


@pytest.mark.parametrize(
    "value",
    [32768.0, 32767.991, -32768.01, 1e300, -1e300, 10**30, "1", True, None, [1.0], {"v": 1}],
)
def test_out_of_range_or_mistyped_values(http: TestClient, value: Any) -> None:
    before = state(http)
    vector = [0.0] * (DIM - 1) + [value]
    assert_error(
        http.post("/v1/memory/upsert_vector", json={"vector": vector}), 400, "INVALID_ARGUMENT"
    )
    response = http.post("/v1/memory/search_vector", json={"query_vector": vector, "k": 1})
    assert_error(response, 400, "INVALID_ARGUMENT")
    assert state(http) == before


def test_extreme_values_are_accepted(http: TestClient) -> None:
    vector = [-32768.0, 32767.99, -32768, 32767][:DIM]
    assert http.post("/v1/memory/upsert_vector", json={"vector": vector}).status_code == 200
    hits = http.post("/v1/memory/search", json={"query_vector": vector, "k": 1}).json()
    assert hits["results"][0]["score"] == 0.0


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"])
def test_non_finite_literals(http: TestClient, literal: str) -> None:
    before = state(http)
    raw = '{"vector": [0, 0, 0, ' + literal + "]}"
    response = http.post("/v1/memory/upsert_vector", content=raw, headers=JSON_BODY)
    assert_error(response, 400, "INVALID_ARGUMENT")
    raw_meta = '{"vector": [0, 0, 0, 0], "metadata": {"x": ' + literal + "}}"
    response = http.post("/v1/memory/upsert_vector", content=raw_meta, headers=JSON_BODY)
    assert_error(response, 400, "INVALID_ARGUMENT")
    raw_search = '{"query_vector": [0, 0, 0, ' + literal + '], "k": 1}'
    response = http.post("/v1/memory/search_vector", content=raw_search, headers=JSON_BODY)
    assert_error(response, 400, "INVALID_ARGUMENT")
    assert state(http) == before


@pytest.mark.parametrize("k", [0, 1001, -5, True, False, 2.0, 1.5, "5", None, [5]])
@pytest.mark.parametrize("route", SEARCH_ROUTES)
def test_k_bounds(http: TestClient, route: str, k: Any) -> None:
    response = http.post(route, json={"query_vector": vec(1), "k": k})
    assert_error(response, 400, "INVALID_ARGUMENT")


@pytest.mark.parametrize("k", [1, 1000])
def test_k_limits_are_inclusive(http: TestClient, k: int) -> None:
    http.post("/v1/memory/upsert_vector", json={"vector": vec(1)})
    assert http.post("/v1/memory/search", json={"query_vector": vec(1), "k": k}).status_code == 200


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b"not json",
        b"[1, 2]",
        b'"a string"',
        b"42",
        b"null",
        b'{"vector": [0, 0, 0, 0],}',
        b'{"vector": [0, 0, 0, 0], "vector": [1, 1, 1, 1]}',
        b'{"vector": [0, 0, 0, 0], "extra": 1}',
        b'{"vektor": [0, 0, 0, 0]}',
        b"\xff\xfe{}",
        b'{"vector": [0, 0, 0, 0], "metadata": "\\ud800"}',
        b'{"vector": [0, 0, 0, 0], "metadata": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"vector": [0, 0, 0, 0], "metadata": ' + b"9" * 5000 + b"}",
        b'{"vector": [0, 0, 0, 0], "tags": "a"}',
        b'{"vector": [0, 0, 0, 0], "tags": [1]}',
        b'{"vector": "0000"}',
    ],
)
def test_malformed_upsert_bodies(http: TestClient, raw: bytes) -> None:
    before = state(http)
    response = http.post("/v1/memory/upsert_vector", content=raw, headers=JSON_BODY)
    assert_error(response, 400, "INVALID_ARGUMENT")
    assert state(http) == before


@pytest.mark.parametrize(
    "body",
    [
        {"k": 1},
        {"query_vector": [0, 0, 0, 0]},
        {"query": [0, 0, 0, 0], "k": 1},
        {"query_vector": [0, 0, 0, 0], "k": 1, "filter": {}},
    ],
)
def test_malformed_search_bodies(http: TestClient, body: dict[str, Any]) -> None:
    assert_error(http.post("/v1/memory/search_vector", json=body), 400, "INVALID_ARGUMENT")


@pytest.mark.parametrize("target", [5, 17, 2**32 - 1])
def test_unknown_document_is_404_and_writes_nothing(http: TestClient, target: int) -> None:
    http.post("/v1/memory/upsert_vector", json={"vector": vec(1)})
    before = state(http)
    records = http.get("/health").json()["records"]
    response = http.post(
        "/v1/memory/upsert_vector",
        json={"vector": vec(2), "attach_to_document_node": target, "metadata": {"m": 1}},
    )
    assert_error(response, 404, "NOT_FOUND")
    assert state(http) == before
    assert http.get("/health").json()["records"] == records


def test_attaching_to_a_chunk_node_is_404(http: TestClient) -> None:
    http.post("/v1/memory/upsert_vector", json={"vector": vec(1)})
    before = state(http)
    response = http.post(
        "/v1/memory/upsert_vector", json={"vector": vec(2), "attach_to_document_node": 1}
    )
    assert_error(response, 404, "NOT_FOUND")
    assert state(http) == before


@pytest.mark.parametrize("target", [-1, 2**32, 1.0, "0", True])
def test_attach_must_be_u32(http: TestClient, target: Any) -> None:
    http.post("/v1/memory/upsert_vector", json={"vector": vec(1)})
    response = http.post(
        "/v1/memory/upsert_vector", json={"vector": vec(2), "attach_to_document_node": target}
    )
    assert_error(response, 400, "INVALID_ARGUMENT")


def test_capacity_is_507_and_writes_nothing(tmp_path: Path) -> None:
    small = open_vmp_store(str(tmp_path / "small.db"), dim=DIM, max_records=2)
    with small, TestClient(build_vmp_app(small, api_key=API_KEY), headers=AUTH) as http:
        for seed in range(2):
            assert http.post("/v1/memory/upsert", json={"vector": vec(seed)}).status_code == 200
        before = state(http)
        response = http.post("/v1/memory/upsert", json={"vector": vec(5), "metadata": {"x": 1}})
        assert_error(response, 507, "CAPACITY_EXCEEDED")
        attach = {"vector": vec(5), "attach_to_document_node": 0}
        assert_error(http.post("/v1/memory/upsert", json=attach), 507, "CAPACITY_EXCEEDED")
        assert state(http) == before
        assert http.get("/health").json()["records"] == 2


def test_meta_set_errors(http: TestClient) -> None:
    http.post("/v1/memory/upsert_vector", json={"vector": vec(1)})
    before = state(http)
    unknown = http.post("/v1/memory/meta/set", json={"target_id": "rec:4", "metadata": {}})
    assert_error(unknown, 404, "NOT_FOUND")
    bodies: list[dict[str, Any]] = [
        {"target_id": "doc:0", "metadata": {}},
        {"target_id": 0, "metadata": {}},
        {"target_id": "rec:0"},
        {"metadata": {}},
        {"target_id": "rec:0", "metadata": {}, "x": 1},
    ]
    for body in bodies:
        assert_error(http.post("/v1/memory/meta/set", json=body), 400, "INVALID_ARGUMENT")
    assert state(http) == before


def test_meta_get_needs_one_target(http: TestClient) -> None:
    assert_error(http.get("/v1/memory/meta/get"), 400, "INVALID_ARGUMENT")
    response = http.get("/v1/memory/meta/get?target_id=rec:0&target_id=rec:1")
    assert_error(response, 400, "INVALID_ARGUMENT")


def test_bad_snapshot_upload_is_400_and_changes_nothing(http: TestClient) -> None:
    http.post("/v1/memory/upsert_vector", json={"vector": vec(1)})
    blob = http.get("/v1/snapshot/download").content
    http.post("/v1/memory/upsert_vector", json={"vector": vec(2)})
    before = state(http)
    flipped = bytearray(blob)
    flipped[len(blob) // 2] ^= 0x10
    for bad in (b"", b"garbage", blob[:-1], bytes(flipped)):
        response = http.post("/v1/snapshot/upload", content=bad, headers=SNAPSHOT_BODY)
        assert_error(response, 400, "INVALID_ARGUMENT")
    assert state(http) == before


def test_unknown_route_and_wrong_method(http: TestClient) -> None:
    assert_error(http.get("/v1/memory/nope"), 404, "NOT_FOUND")
    wrong = http.get("/v1/memory/upsert_vector")
    assert_error(wrong, 405, "INVALID_ARGUMENT")
    assert "POST" in wrong.headers["allow"]
    assert_error(http.post("/health"), 405, "INVALID_ARGUMENT")


def test_body_size_limit(store: VmpStore) -> None:
    app = build_vmp_app(store, api_key=API_KEY, max_body_bytes=100)
    with TestClient(app, headers=AUTH) as http:
        big = {"vector": vec(1), "metadata": "x" * 200}
        assert_error(http.post("/v1/memory/upsert_vector", json=big), 400, "INVALID_ARGUMENT")
        assert (
            http.post("/v1/memory/upsert_vector", json={"vector": [1, 2, 3, 4]}).status_code == 200
        )


def test_error_messages_do_not_echo_content(http: TestClient) -> None:
    secret = "sekrit-value-12345"
    responses = [
        http.post("/v1/memory/upsert_vector", json={"vector": [1.5, 2.5, 3.5], "metadata": secret}),
        http.post("/v1/memory/upsert_vector", json={"vector": [1.5, 2.5, 3.5, 99999.25]}),
        http.post("/v1/memory/upsert_vector", json={"vector": vec(1), "tags": [secret, 1]}),
        http.post("/v1/memory/upsert_vector", json={"vector": vec(1), secret: 1}),
        http.post("/v1/memory/meta/set", json={"target_id": secret, "metadata": secret}),
    ]
    for response in responses:
        assert response.status_code == 400
        text = response.text
        assert secret not in text and "99999" not in text and "2.5" not in text


def test_internal_errors_are_500_without_detail(
    store: VmpStore, caplog: pytest.LogCaptureFixture
) -> None:
    app = build_vmp_app(store, api_key=API_KEY)
    store.close()
    with TestClient(app, headers=AUTH) as http:
        with caplog.at_level(logging.ERROR, logger="ratatoskr.vmp"):
            response = http.post("/v1/memory/search", json={"query_vector": vec(1), "k": 1})
        assert_error(response, 500, "INTERNAL_ERROR")
        assert_error(http.get("/health"), 500, "INTERNAL_ERROR")


# -- authentication ---------------------------------------------------------------


ALL_ROUTES = [
    ("POST", "/v1/memory/upsert_vector"),
    ("POST", "/v1/memory/upsert"),
    ("POST", "/v1/memory/search_vector"),
    ("POST", "/v1/memory/search"),
    ("POST", "/v1/memory/meta/set"),
    ("GET", "/v1/memory/meta/get?target_id=rec:0"),
    ("GET", "/v1/snapshot/download"),
    ("POST", "/v1/snapshot/upload"),
    ("GET", "/v1/proof/state"),
    ("GET", "/health"),
    ("GET", "/no/such/route"),
]


BAD_HEADERS = [
    {},
    {"Authorization": "Bearer wrong"},
    {"Authorization": f"Bearer {API_KEY}x"},
    {"Authorization": f"Bearer {API_KEY[:-1]}"},
    {"Authorization": f"Basic {API_KEY}"},
    {"Authorization": API_KEY},
    {"Authorization": "Bearer"},
    {"Authorization": "Bearer "},
]


@pytest.mark.parametrize(("method", "path"), ALL_ROUTES)
def test_missing_or_wrong_key_is_401_with_empty_body(app: Any, method: str, path: str) -> None:
    before = app_state(app)
    with TestClient(app) as http:
        for headers in BAD_HEADERS:
            response = http.request(method, path, headers=headers, json={"vector": vec(1)})
            assert response.status_code == 401
            assert response.content == b""
            assert response.headers["www-authenticate"] == "Bearer"
        # Two Authorization headers, even if one is right, are refused.
        twice = [("Authorization", f"Bearer {API_KEY}"), ("Authorization", "Bearer wrong")]
        assert http.request(method, path, headers=twice).status_code == 401
    assert app_state(app) == before


def app_state(app: Any) -> str:
    with TestClient(app, headers=AUTH) as http:
        return state(http)


def test_bearer_scheme_is_case_insensitive(app: Any) -> None:
    with TestClient(app, headers={"Authorization": f"bearer {API_KEY}"}) as http:
        assert http.get("/health").status_code == 200


def test_key_configuration(store: VmpStore, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ValueError, match="api_key"):
        build_vmp_app(store, api_key=None)
    with pytest.raises(ValueError, match="empty"):
        build_vmp_app(store, api_key="")
    with caplog.at_level(logging.WARNING, logger="ratatoskr.vmp"):
        open_app = build_vmp_app(store, api_key=None, allow_no_key=True)
    assert "without authentication" in caplog.text
    with TestClient(open_app) as http:
        assert http.get("/health").status_code == 200
        assert http.get("/health", headers={"Authorization": "Bearer anything"}).status_code == 200


def test_loopback_hosts() -> None:
    for host in ("127.0.0.1", "127.8.9.1", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback_host(host)
    for host in ("0.0.0.0", "::", "192.168.1.4", "example.org", ""):
        assert not is_loopback_host(host)


def test_unexpected_exceptions_are_500_and_logged_without_content(
    store: VmpStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("secret-content-in-exception")

    monkeypatch.setattr(store, "search_vector", explode)
    app = build_vmp_app(store, api_key=API_KEY)
    with TestClient(app, headers=AUTH) as http, caplog.at_level(logging.ERROR, "ratatoskr.vmp"):
        response = http.post("/v1/memory/search", json={"query_vector": vec(1), "k": 1})
    assert_error(response, 500, "INTERNAL_ERROR")
    assert "secret-content" not in response.text
    assert "RuntimeError" in caplog.text
    assert "secret-content" not in caplog.text


def test_store_calls_run_in_worker_threads(
    store: VmpStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    real = store.health

    def spy() -> dict[str, Any]:
        seen.append(threading.current_thread().name)
        return real()

    monkeypatch.setattr(store, "health", spy)
    with TestClient(build_vmp_app(store, api_key=API_KEY), headers=AUTH) as http:
        assert http.get("/health").status_code == 200
    assert seen and seen[0].startswith("AnyIO worker thread")
