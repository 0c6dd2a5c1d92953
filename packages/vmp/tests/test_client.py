"""The Python client against the app, in-process through a sync httpx transport."""

from __future__ import annotations

import hashlib
import io
import math
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from ratatoskr.vmp import (
    CapacityExceeded,
    DimMismatch,
    InternalError,
    InvalidArgument,
    NotFound,
    PayloadTooLarge,
    Unauthenticated,
    Unavailable,
    UnsupportedMediaType,
    VmpError,
    VmpStore,
    build_vmp_app,
    open_vmp_store,
)
from ratatoskr.vmp.chunking import chunk_text
from ratatoskr.vmp.client import VmpClient, WrongBaseURL
from ratatoskr.vmp.errors import error_from_wire
from ratatoskr.vmp.snapshot import MAGIC

from .conftest import API_KEY, DIM, AppTransport, vec


def toy_embed(text: str) -> list[float]:
    """Deterministic toy embedding: the first DIM bytes of SHA-256, scaled to [-1, 1)."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return [(b - 128) / 128 for b in digest[:DIM]]


@pytest.fixture
def store() -> Iterator[VmpStore]:
    s = open_vmp_store(":memory:", dim=DIM, max_records=50)
    yield s
    s.close()


@pytest.fixture
def client(store: VmpStore) -> Iterator[VmpClient]:
    transport = AppTransport(build_vmp_app(store, api_key=API_KEY))
    with VmpClient("http://vmp.test/", API_KEY, transport=transport, embed=toy_embed) as c:
        yield c


def test_vector_round_trip(client: VmpClient) -> None:
    first = client.upsert_vector(vec(1), tags=["a"], metadata={"n": 1})
    assert first == {
        "memory_id": "rec:0",
        "record_id": 0,
        "document_node_id": 0,
        "chunk_node_id": 1,
    }
    second = client.upsert_vector(np.asarray(vec(2)), attach_to_document_node=0)
    assert second["chunk_node_id"] == 2
    results = client.search_vector(vec(1), k=2)["results"]
    assert [r["record_id"] for r in results] == [0, 1]
    assert results[0] == {"memory_id": "rec:0", "record_id": 0, "score": 0.0, "metadata": {"n": 1}}


def test_text_operations(client: VmpClient) -> None:
    text = " ".join(f"word{i}" for i in range(60))
    chunks = chunk_text(text, max_chars=64)
    assert len(chunks) > 3
    result = client.upsert_text(text, chunk_size=64, tags=["doc"], metadata={"source": "t"})
    n = len(chunks)
    assert result == {
        "memory_ids": [f"rec:{i}" for i in range(n)],
        "record_ids": list(range(n)),
        "document_node_id": 0,
        "chunk_node_ids": list(range(1, n + 1)),
        "chunk_count": n,
    }
    # A second document starts after the first one's nodes.
    again = client.upsert_text("another short text")
    assert again["document_node_id"] == n + 1
    assert again["chunk_node_ids"] == [n + 2]
    assert again["record_ids"] == [n]
    # Searching with a chunk's own text finds that chunk first, at distance 0.
    hit = client.search_text(chunks[2], k=3)["results"][0]
    assert (hit["record_id"], hit["score"], hit["metadata"]) == (2, 0.0, {"source": "t"})
    assert client.get_metadata("node:0") is None


def test_text_needs_content_and_an_embedder(store: VmpStore) -> None:
    transport = AppTransport(build_vmp_app(store, api_key=API_KEY))
    with VmpClient("http://vmp.test", API_KEY, transport=transport) as bare:
        with pytest.raises(ValueError, match="embed"):
            bare.upsert_text("text")
        assert bare.upsert_text("x", embed=toy_embed)["chunk_count"] == 1
        with pytest.raises(ValueError, match="content"):
            bare.upsert_text("   \n ", embed=toy_embed)


def test_embedder_failure_writes_nothing(client: VmpClient) -> None:
    text = " ".join(f"w{i}" for i in range(40))
    before = client.state_hash()

    def broken(chunk: str) -> list[float]:
        if chunk.startswith("w1"):
            raise RuntimeError("embedder down")
        return toy_embed(chunk)

    # Every chunk is embedded before the first write: a failing embedder stores nothing.
    with pytest.raises(RuntimeError):
        client.upsert_text(text, chunk_size=16, embed=broken)
    assert client.state_hash() == before


def test_server_refusal_part_way_keeps_earlier_chunks(client: VmpClient) -> None:
    # VMP v0 has no batch: chunks stored before a refused one stay (documented).
    calls: list[str] = []

    def wrong_third(chunk: str) -> list[float]:
        calls.append(chunk)
        return [0.0] * (DIM + 1) if len(calls) == 3 else toy_embed(chunk)

    with pytest.raises(DimMismatch):
        client.upsert_text(" ".join(f"w{i}" for i in range(40)), chunk_size=16, embed=wrong_third)
    assert client.health()["records"] == 2


def test_typed_errors(client: VmpClient) -> None:
    client.upsert_vector(vec(1))
    with pytest.raises(DimMismatch) as dim:
        client.search_vector([0.0] * (DIM + 2), k=1)
    assert (dim.value.code, dim.value.status) == ("DIM_MISMATCH", 400)
    with pytest.raises(InvalidArgument):
        client.search_vector(vec(1), k=0)
    with pytest.raises(InvalidArgument):
        client.upsert_vector([0.0, 0.0, 0.0, 40000.0])
    with pytest.raises(NotFound) as missing:
        client.upsert_vector(vec(2), attach_to_document_node=1)
    assert missing.value.status == 404
    with pytest.raises(NotFound):
        client.set_metadata("rec:99", {"x": 1})
    with pytest.raises(InvalidArgument):
        client.restore(b"not a snapshot")
    # Non-finite values are refused before they leave the client.
    with pytest.raises(InvalidArgument):
        client.upsert_vector([math.nan] * DIM)
    with pytest.raises(InvalidArgument):
        client.upsert_vector(vec(1), metadata={"x": math.inf})


def test_capacity_error(client: VmpClient) -> None:
    for seed in range(50):
        client.upsert_vector(vec(seed))
    with pytest.raises(CapacityExceeded) as full:
        client.upsert_vector(vec(99))
    assert (full.value.code, full.value.status) == ("CAPACITY_EXCEEDED", 507)


def test_metadata_snapshot_restore_and_proof(client: VmpClient, store: VmpStore) -> None:
    client.upsert_vector(vec(1))
    client.set_metadata("rec:0", {"k": [1, 2]})
    client.set_metadata("node:0", "document")
    assert client.get_metadata("rec:0") == {"k": [1, 2]}
    assert client.get_metadata("node:0") == "document"
    assert client.get_metadata("rec:7") is None
    digest = client.state_hash()
    assert digest == store.state_hash()
    blob = client.snapshot()
    assert blob == store.snapshot()
    client.upsert_vector(vec(2))
    client.restore(blob)
    assert client.state_hash() == digest
    assert client.health() == {"status": "ok", "dim": DIM, "records": 1}


def test_wrong_key_and_unreachable_server(store: VmpStore) -> None:
    app = build_vmp_app(store, api_key=API_KEY)
    with VmpClient("http://vmp.test", "wrong", transport=AppTransport(app)) as wrong:
        with pytest.raises(Unauthenticated) as info:
            wrong.health()
        assert info.value.status == 401
    keyless = VmpClient("http://vmp.test", transport=AppTransport(app))
    with keyless, pytest.raises(Unauthenticated):
        keyless.upsert_vector(vec(1))

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with VmpClient("http://vmp.test", API_KEY, transport=httpx.MockTransport(refuse)) as down:
        with pytest.raises(Unavailable) as gone:
            down.health()
        assert gone.value.status == 0


def test_non_vmp_error_responses() -> None:
    def proxy_error(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="bad gateway")

    with VmpClient("http://vmp.test", API_KEY, transport=httpx.MockTransport(proxy_error)) as c:
        with pytest.raises(VmpError) as info:
            c.health()
        assert (info.value.code, info.value.status) == ("INTERNAL_ERROR", 502)
    assert type(error_from_wire("NOT_FOUND", 404, "x")) is NotFound
    assert type(error_from_wire("NOT_FOUND", 400, "x")) is VmpError
    assert type(error_from_wire("SOMETHING_NEW", 418, "x")) is VmpError


# The plane's error table (shared/spec/vmp-plane.md): each class's code and status,
# and whether a response can carry it back to that class.
_ERROR_TABLE: list[tuple[type[VmpError], str, int, bool]] = [
    (InvalidArgument, "INVALID_ARGUMENT", 400, True),
    (PayloadTooLarge, "INVALID_ARGUMENT", 413, True),
    (UnsupportedMediaType, "INVALID_ARGUMENT", 415, True),
    (DimMismatch, "DIM_MISMATCH", 400, True),
    (NotFound, "NOT_FOUND", 404, True),
    (CapacityExceeded, "CAPACITY_EXCEEDED", 507, True),
    (InternalError, "INTERNAL_ERROR", 500, True),
    (Unauthenticated, "UNAUTHENTICATED", 401, False),
    (Unavailable, "UNAVAILABLE", 0, False),
]


@pytest.mark.parametrize(("cls", "code", "status", "on_wire"), _ERROR_TABLE)
def test_each_error_keeps_its_code_and_status(
    cls: type[VmpError], code: str, status: int, on_wire: bool
) -> None:
    err = cls("what failed")  # type: ignore[call-arg]  # coded errors take the message only
    assert (err.code, err.status, err.message) == (code, status, "what failed")
    assert err.to_body() == {"error": "what failed", "code": code}
    back = error_from_wire(code, status, "m")
    assert (type(back) is cls) is on_wire
    assert (back.code, back.status, back.message) == (code, status, "m")


def test_chunking() -> None:
    assert chunk_text("") == []
    assert chunk_text("  a  b\n\tc ") == ["a b c"]
    assert chunk_text("abcdefgh", max_chars=3) == ["abc", "def", "gh"]
    assert chunk_text("ab cd ef", max_chars=5) == ["ab cd", "ef"]
    assert chunk_text("x abcdefg y", max_chars=3) == ["x", "abc", "def", "g y"]
    text = " ".join(f"w{i}" for i in range(500))
    chunks = chunk_text(text, max_chars=50)
    assert all(len(c) <= 50 for c in chunks)
    assert " ".join(chunks) == text
    with pytest.raises(ValueError, match="max_chars"):
        chunk_text("a", max_chars=0)


def test_every_call_sends_the_content_type_of_its_route() -> None:
    seen: list[tuple[str, str, str | None]] = []
    answers: dict[str, object] = {
        "/v1/memory/upsert_vector": {
            "memory_id": "rec:0",
            "record_id": 0,
            "document_node_id": 0,
            "chunk_node_id": 1,
        },
        "/v1/memory/search_vector": {"results": []},
        "/v1/memory/meta/set": {"success": True},
        "/v1/memory/meta/get": {"target_id": "rec:0", "metadata": None},
        "/v1/snapshot/upload": {"success": True},
        "/v1/proof/state": {"final_state_hash": "0" * 64},
        "/health": {"status": "ok", "dim": DIM, "records": 0},
    }

    def record(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path, request.headers.get("content-type")))
        if request.url.path == "/v1/snapshot/download":
            return httpx.Response(200, content=b"blob")
        return httpx.Response(200, json=answers[request.url.path])

    with VmpClient("http://vmp.test", API_KEY, transport=httpx.MockTransport(record)) as c:
        c.upsert_vector(vec(1))
        c.search_vector(vec(1), 1)
        c.upsert_text("some text", embed=toy_embed)
        c.search_text("a query", embed=toy_embed)
        c.set_metadata("rec:0", {"a": 1})
        c.get_metadata("rec:0")
        c.snapshot()
        c.snapshot_to(io.BytesIO())
        c.restore(b"blob")
        c.restore(io.BytesIO(b"blob"))
        c.state_hash()
        c.health()
    for method, path, content_type in seen:
        if method == "GET":
            assert content_type is None, path
        elif path == "/v1/snapshot/upload":
            assert content_type == "application/octet-stream"
        else:
            assert content_type == "application/json", path
    assert {path for _, path, _ in seen} == {*answers, "/v1/snapshot/download"}


def test_restore_streams_a_file_and_snapshot_to_writes_one(
    client: VmpClient, store: VmpStore, tmp_path: Path
) -> None:
    for seed in range(5):
        client.upsert_vector(vec(seed), metadata={"seed": seed})
    digest = client.state_hash()
    path = tmp_path / "snap.bin"
    with open(path, "wb") as out:
        size = client.snapshot_to(out)
    assert path.read_bytes() == store.snapshot() and size == path.stat().st_size
    client.upsert_vector(vec(9))
    with open(path, "rb") as snapshot:
        client.restore(snapshot)
    assert client.state_hash() == digest
    # Not seekable: sent chunked, without a Content-Length.
    client.upsert_vector(vec(9))
    with open(path, "rb", buffering=0) as raw:
        client.restore(io.BufferedReader(Unseekable(raw)))
    assert client.state_hash() == digest


class Unseekable(io.RawIOBase):
    def __init__(self, inner: io.RawIOBase) -> None:
        self._inner = inner

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, buffer: Any) -> int | None:
        return self._inner.readinto(buffer)


def test_upload_refusals_are_typed(store: VmpStore) -> None:
    app = build_vmp_app(store, api_key=API_KEY, max_snapshot_bytes=100)
    with VmpClient("http://vmp.test", API_KEY, transport=AppTransport(app)) as c:
        with pytest.raises(PayloadTooLarge) as big:
            c.restore(bytes(101))
        assert (big.value.code, big.value.status) == ("INVALID_ARGUMENT", 413)
        assert isinstance(big.value, InvalidArgument)
        with pytest.raises(PayloadTooLarge):
            c.restore(io.BytesIO(bytes(101)))
        # Chunked: the snapshot's own header announces more than the cap.
        announcing = struct.pack("<8sHHQ", MAGIC, 1, 0, 101 - 52) + bytes(81)
        with pytest.raises(PayloadTooLarge):
            c.restore(iter_file(announcing))
    assert type(error_from_wire("INVALID_ARGUMENT", 415, "x")) is UnsupportedMediaType
    assert type(error_from_wire("INVALID_ARGUMENT", 413, "x")) is PayloadTooLarge
    assert type(error_from_wire("INVALID_ARGUMENT", 400, "x")) is InvalidArgument
    assert type(error_from_wire("INVALID_ARGUMENT", 418, "x")) is VmpError


def iter_file(data: bytes) -> io.BufferedReader:
    return io.BufferedReader(Unseekable(io.BytesIO(data)))  # type: ignore[arg-type]


def test_snapshot_to_raises_the_servers_error(store: VmpStore) -> None:
    app = build_vmp_app(store, api_key=API_KEY)
    store.close()
    with VmpClient("http://vmp.test", API_KEY, transport=AppTransport(app)) as c:
        with pytest.raises(VmpError) as info:
            c.snapshot_to(io.BytesIO())
        assert (info.value.code, info.value.status) == ("INTERNAL_ERROR", 500)


def test_wrong_base_url_is_named(store: VmpStore) -> None:
    """A combined server mounts VMP at /vmp; without it the server answers a plain 404."""
    combined = Starlette(routes=[Mount("/vmp", app=build_vmp_app(store, api_key=API_KEY))])
    with VmpClient("http://vmp.test/vmp", API_KEY, transport=AppTransport(combined)) as right:
        assert right.health()["dim"] == DIM
    with VmpClient("http://vmp.test", API_KEY, transport=AppTransport(combined)) as wrong:
        with pytest.raises(WrongBaseURL) as info:
            wrong.upsert_vector(vec(1))
        with pytest.raises(WrongBaseURL):
            wrong.snapshot_to(io.BytesIO())
    err = info.value
    assert isinstance(err, VmpError)
    assert (err.code, err.status, err.path) == ("WRONG_BASE_URL", 404, "/v1/memory/upsert_vector")
    assert "base URL" in err.message and "/vmp" in err.message
    assert API_KEY not in err.message
    with (
        VmpClient("http://vmp.test/vmp", API_KEY, transport=AppTransport(combined)) as right,
        pytest.raises(NotFound),
    ):
        right.set_metadata("rec:999", None)  # a VMP 404 with its body stays NotFound


def test_clients_share_one_tls_context() -> None:
    one, two = VmpClient("http://127.0.0.1:1"), VmpClient("https://example.invalid", "k")
    try:
        contexts = [c._http._transport._pool._ssl_context for c in (one, two)]  # type: ignore[attr-defined]
        assert contexts[0] is contexts[1]
    finally:
        one.close()
        two.close()
