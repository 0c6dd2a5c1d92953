"""Typed bodies and capped, spooled snapshot uploads, in-process (TestClient and raw ASGI).

The memory bound itself is measured over a real socket in test_upload_http.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import stat
import struct
import tempfile
import time
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import IO, Any

import anyio
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from ratatoskr.vmp import VmpStore, build_vmp_app, open_vmp_store
from ratatoskr.vmp import upload as upload_module
from ratatoskr.vmp.snapshot import MAGIC, snapshot_size_limit

from .conftest import API_KEY, AUTH, DIM, SNAPSHOT_BODY, vec

UPLOAD = "/v1/snapshot/upload"
JSON_ROUTES = [
    ("/v1/memory/upsert_vector", {"vector": vec(1)}),
    ("/v1/memory/upsert", {"vector": vec(1)}),
    ("/v1/memory/search_vector", {"query_vector": vec(1), "k": 1}),
    ("/v1/memory/search", {"query_vector": vec(1), "k": 1}),
    ("/v1/memory/meta/set", {"target_id": "rec:0", "metadata": {"a": 1}}),
]
# What a browser may send cross-site without a preflight, and near misses.
FOREIGN_TYPES = [
    None,
    "text/plain",
    "text/plain; charset=utf-8",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/jsonx",
    "application/json-patch+json",
    "text/json",
    "",
]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[VmpStore]:
    """On disk: uploads are spooled beside the database file."""
    s = open_vmp_store(str(tmp_path / "vmp.db"), dim=DIM, max_records=100)
    s.upsert_vector(vec(1), metadata={"a": 1})
    yield s
    s.close()


@pytest.fixture
def spools(monkeypatch: pytest.MonkeyPatch) -> list[IO[bytes]]:
    """Every spool file the app opens, with its mode and path taken while it was open."""
    opened: list[IO[bytes]] = []
    real = tempfile.TemporaryFile

    def spy(*args: Any, **kwargs: Any) -> IO[bytes]:
        file: IO[bytes] = real(*args, **kwargs)
        st = os.fstat(file.fileno())
        file.seen_mode = stat.S_IMODE(st.st_mode)  # type: ignore[attr-defined]
        file.seen_links = st.st_nlink  # type: ignore[attr-defined]
        file.seen_path = os.readlink(f"/proc/self/fd/{file.fileno()}")  # type: ignore[attr-defined]
        opened.append(file)
        return file

    monkeypatch.setattr(tempfile, "TemporaryFile", spy)
    return opened


def state(http: TestClient) -> str:
    digest = http.get("/v1/proof/state").json()["final_state_hash"]
    assert isinstance(digest, str)
    return digest


def assert_error(response: Any, status: int, code: str = "INVALID_ARGUMENT") -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "code"} and body["code"] == code


def headers_with(content_type: str | None) -> dict[str, str]:
    return {} if content_type is None else {"Content-Type": content_type}


def snapshot_of(records: int) -> bytes:
    with open_vmp_store(":memory:", dim=DIM) as source:
        for seed in range(records):
            source.upsert_vector(vec(seed), tags=[str(seed)], metadata={"seed": seed})
        return source.snapshot()


def header_announcing(total: int) -> bytes:
    return struct.pack("<8sHHQ", MAGIC, 1, 0, total - 52)


# -- Content-Type --------------------------------------------------------------------


@pytest.mark.parametrize("content_type", FOREIGN_TYPES)
@pytest.mark.parametrize(("route", "body"), JSON_ROUTES)
def test_json_routes_take_only_application_json(
    store: VmpStore, route: str, body: dict[str, Any], content_type: str | None
) -> None:
    with TestClient(build_vmp_app(store, api_key=API_KEY), headers=AUTH) as http:
        before, records = state(http), store.record_count()
        raw = json.dumps(body).encode()
        response = http.post(route, content=raw, headers=headers_with(content_type))
        assert_error(response, 415)
        assert "application/json" in response.json()["error"]
        assert (state(http), store.record_count()) == (before, records)


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON"]
)
@pytest.mark.parametrize(("route", "body"), JSON_ROUTES)
def test_json_routes_accept_json_with_parameters(
    store: VmpStore, route: str, body: dict[str, Any], content_type: str
) -> None:
    with TestClient(build_vmp_app(store, api_key=API_KEY), headers=AUTH) as http:
        response = http.post(
            route, content=json.dumps(body), headers={"Content-Type": content_type}
        )
        assert response.status_code == 200, response.text


def test_the_type_is_checked_after_authentication_and_routing(store: VmpStore) -> None:
    with TestClient(build_vmp_app(store, api_key=API_KEY)) as http:
        # No key: 401 and nothing said about the body.
        assert http.post("/v1/memory/upsert", content=b"{}").status_code == 401
        assert http.post(UPLOAD, content=b"x").status_code == 401
        assert http.post("/health", content=b"{}", headers=AUTH).status_code == 405


@pytest.mark.parametrize(
    "content_type", [*FOREIGN_TYPES, "application/json", "application/octet-streamx"]
)
def test_snapshot_upload_takes_only_octet_stream(
    store: VmpStore, spools: list[IO[bytes]], content_type: str | None
) -> None:
    blob = snapshot_of(3)
    with TestClient(build_vmp_app(store, api_key=API_KEY), headers=AUTH) as http:
        before = state(http)
        response = http.post(UPLOAD, content=blob, headers=headers_with(content_type))
        assert_error(response, 415)
        assert "application/octet-stream" in response.json()["error"]
        assert state(http) == before
    assert spools == []  # refused before anything was received or written


@pytest.mark.parametrize(
    "content_type", ["application/octet-stream", "Application/Octet-Stream; x=1"]
)
def test_snapshot_upload_accepts_octet_stream(store: VmpStore, content_type: str) -> None:
    blob = snapshot_of(3)
    with TestClient(build_vmp_app(store, api_key=API_KEY), headers=AUTH) as http:
        assert http.post(UPLOAD, content=blob, headers={"Content-Type": content_type}).json() == {
            "success": True
        }
        assert http.get("/v1/snapshot/download").content == blob


def test_no_key_does_not_lift_the_type_rule(store: VmpStore) -> None:
    app = build_vmp_app(store, api_key=None, allow_no_key=True)
    with TestClient(app) as http:
        before = state(http)
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        assert_error(http.post("/v1/memory/upsert", content=json.dumps({"vector": vec(2)})), 415)
        assert_error(http.post(UPLOAD, content=snapshot_of(1), headers=form), 415)
        assert state(http) == before


# -- the cap -------------------------------------------------------------------------


def test_default_cap_is_derived_from_the_store(store: VmpStore) -> None:
    cap = snapshot_size_limit(store.max_records, store.dim)
    assert cap == 76 + 100 * (47 + 4 * DIM + 2048)
    with TestClient(build_vmp_app(store, api_key=API_KEY), headers=AUTH) as http:
        before = state(http)
        too_big = http.post(UPLOAD, content=bytes(cap + 1), headers=SNAPSHOT_BODY)
        assert_error(too_big, 413)
        assert str(cap) in too_big.json()["error"]
        # At the cap itself the size is fine; these bytes are just not a snapshot.
        assert_error(http.post(UPLOAD, content=bytes(cap), headers=SNAPSHOT_BODY), 400)
        assert state(http) == before


def test_the_limit_formula() -> None:
    assert snapshot_size_limit(1_000_000, 16) == 2_159_000_076
    assert snapshot_size_limit(0, 16) == 76
    assert snapshot_size_limit(10, 4, json_bytes_per_record=0) == 76 + 10 * (47 + 16)
    with pytest.raises(ValueError, match="negative"):
        snapshot_size_limit(-1, 16)


def test_a_full_store_without_json_fits_the_formula_exactly() -> None:
    """Every record in a document of its own: the worst case of the fixed bytes."""
    with open_vmp_store(":memory:", dim=DIM, max_records=7) as full:
        for seed in range(7):
            full.upsert_vector(vec(seed))
        blob = full.snapshot()
    assert len(blob) == snapshot_size_limit(7, DIM, json_bytes_per_record=0)


def test_explicit_cap(store: VmpStore) -> None:
    blob = snapshot_of(5)
    with TestClient(
        build_vmp_app(store, api_key=API_KEY, max_snapshot_bytes=len(blob)), headers=AUTH
    ) as http:
        assert http.post(UPLOAD, content=blob, headers=SNAPSHOT_BODY).status_code == 200
    with TestClient(
        build_vmp_app(store, api_key=API_KEY, max_snapshot_bytes=len(blob) - 1), headers=AUTH
    ) as http:
        before = state(http)
        assert_error(http.post(UPLOAD, content=snapshot_of(6), headers=SNAPSHOT_BODY), 413)
        # Chunked (no Content-Length): the snapshot's own header announces too much.
        chunked = http.post(UPLOAD, content=iter([snapshot_of(6)]), headers=SNAPSHOT_BODY)
        assert_error(chunked, 413)
        assert state(http) == before
    for bad in (0, -1):
        with pytest.raises(ValueError, match="at least 1"):
            build_vmp_app(store, api_key=API_KEY, max_snapshot_bytes=bad)


def test_a_download_larger_than_the_cap_is_warned_about(
    store: VmpStore, caplog: pytest.LogCaptureFixture
) -> None:
    size = len(store.snapshot())
    for cap, warned in ((size, False), (size - 1, True)):
        caplog.clear()
        app = build_vmp_app(store, api_key=API_KEY, max_snapshot_bytes=cap)
        with TestClient(app, headers=AUTH) as http, caplog.at_level(logging.WARNING):
            assert http.get("/v1/snapshot/download").status_code == 200
        assert ("exceeds the upload cap" in caplog.text) is warned
    assert '"a"' not in caplog.text  # sizes only, never content


def test_chunked_uploads(store: VmpStore) -> None:
    blob = snapshot_of(4)
    with TestClient(build_vmp_app(store, api_key=API_KEY), headers=AUTH) as http:
        assert http.post(UPLOAD, content=iter([blob]), headers=SNAPSHOT_BODY).status_code == 200
        digest = state(http)
        for bad in (blob + b"\x00", blob[:-1], b"garbage" * 10, blob[:10]):
            assert_error(http.post(UPLOAD, content=iter([bad]), headers=SNAPSHOT_BODY), 400)
        assert state(http) == digest


def test_counting_caps_a_body_even_before_its_header_is_in(store: VmpStore) -> None:
    with TestClient(
        build_vmp_app(store, api_key=API_KEY, max_snapshot_bytes=10), headers=AUTH
    ) as http:
        assert_error(http.post(UPLOAD, content=iter([b"x" * 11]), headers=SNAPSHOT_BODY), 413)


# -- what the app reads: a raw ASGI driver that counts --------------------------------


def upload_scope(headers: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": UPLOAD,
        "raw_path": UPLOAD.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in {**AUTH, **headers}.items()],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 80),
    }


def drive(app: Starlette, headers: dict[str, str], chunks: list[bytes]) -> tuple[int, Any, int]:
    """POST ``chunks`` to the upload route one ASGI message each; the status, the JSON
    answer and how many body messages the app pulled."""
    messages = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]
    pulled = 0
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal pulled
        if pulled < len(messages):
            pulled += 1
            return messages[pulled - 1]
        await asyncio.sleep(3600)  # an unread body never ends: a hang shows a bug
        raise AssertionError("unreachable")

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = upload_scope(headers)
    asyncio.run(asyncio.wait_for(app(scope, receive, send), 30))
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(body), pulled


def test_a_content_length_above_the_cap_is_refused_unread(store: VmpStore) -> None:
    app = build_vmp_app(store, api_key=API_KEY, max_snapshot_bytes=1000)
    status, body, pulled = drive(app, {**SNAPSHOT_BODY, "content-length": "1001"}, [b"x" * 1001])
    assert (status, body["code"], pulled) == (413, "INVALID_ARGUMENT", 0)


def test_a_foreign_blob_is_refused_at_its_first_bytes(store: VmpStore) -> None:
    app = build_vmp_app(store, api_key=API_KEY)
    chunks = [b"SQLite format 3\x00\x00\x00\x00\x00"] + [b"\x00" * 65536] * 100
    status, body, pulled = drive(app, SNAPSHOT_BODY, chunks)
    assert (status, body["code"], pulled) == (400, "INVALID_ARGUMENT", 1)


def test_a_header_announcing_more_than_the_cap_is_refused_at_once(store: VmpStore) -> None:
    app = build_vmp_app(store, api_key=API_KEY, max_snapshot_bytes=1 << 20)
    # The header arrives in two pieces; nothing after it is read.
    head = header_announcing((1 << 20) + 1)
    chunks = [head[:7], head[7:], *([b"\x00" * 65536] * 100)]
    status, body, pulled = drive(app, SNAPSHOT_BODY, chunks)
    assert (status, body["code"], pulled) == (413, "INVALID_ARGUMENT", 2)


def test_bytes_beyond_the_announced_size_are_refused_there(store: VmpStore) -> None:
    blob = snapshot_of(2)
    app = build_vmp_app(store, api_key=API_KEY)
    chunks = [blob, b"\x00" * 10, *([b"\x00" * 65536] * 100)]
    status, body, pulled = drive(app, SNAPSHOT_BODY, chunks)
    assert (status, body["code"], pulled) == (400, "INVALID_ARGUMENT", 2)
    assert "length" in body["error"]


def test_a_content_length_disagreeing_with_the_header_is_refused_at_once(
    store: VmpStore,
) -> None:
    blob = snapshot_of(2)
    app = build_vmp_app(store, api_key=API_KEY)
    shorter = {**SNAPSHOT_BODY, "content-length": str(len(blob) - 1)}
    status, body, pulled = drive(app, shorter, [blob[:20], blob[20:-1]])
    assert (status, body["code"], pulled) == (400, "INVALID_ARGUMENT", 1)


def test_an_upload_cut_short_is_refused(store: VmpStore) -> None:
    blob = snapshot_of(2)
    app = build_vmp_app(store, api_key=API_KEY)
    before = store.state_hash()
    messages = iter(
        [
            {"type": "http.request", "body": blob[:30], "more_body": True},
            {"type": "http.disconnect"},
        ]
    )

    async def receive() -> Any:
        return next(messages)

    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": UPLOAD,
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"authorization", AUTH["Authorization"].encode()),
            (b"content-type", b"application/octet-stream"),
        ],
    }
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 400
    assert store.state_hash() == before


def test_a_cancelled_upload_still_closes_its_spool(
    store: VmpStore, spools: list[IO[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server cancels a request whose client went away; the spool must not wait
    for the garbage collector."""
    real = store.restore_from_file

    def slow(file: IO[bytes]) -> None:
        time.sleep(0.3)
        real(file)

    monkeypatch.setattr(store, "restore_from_file", slow)
    app = build_vmp_app(store, api_key=API_KEY)
    message = {"type": "http.request", "body": snapshot_of(2), "more_body": False}

    async def receive() -> dict[str, Any]:
        return message

    async def send(message: MutableMapping[str, Any]) -> None:
        pass

    async def main() -> None:
        with anyio.move_on_after(0.1):  # while the restore runs
            await app(upload_scope(SNAPSHOT_BODY), receive, send)

    anyio.run(main)
    assert len(spools) == 1 and spools[0].closed


# -- the spool file --------------------------------------------------------------------


@pytest.mark.parametrize("good", [True, False])
def test_the_spool_is_owner_only_beside_the_database_and_gone_after(
    store: VmpStore, spools: list[IO[bytes]], tmp_path: Path, good: bool
) -> None:
    blob = snapshot_of(3)
    payload = blob if good else blob[:-1] + bytes([blob[-1] ^ 1])
    listing = sorted(os.listdir(tmp_path))
    with TestClient(build_vmp_app(store, api_key=API_KEY), headers=AUTH) as http:
        response = http.post(UPLOAD, content=payload, headers=SNAPSHOT_BODY)
        assert response.status_code == (200 if good else 400)
    assert len(spools) == 1
    spool = spools[0]
    assert spool.closed
    assert spool.seen_mode == 0o600  # type: ignore[attr-defined]
    assert spool.seen_links == 0  # type: ignore[attr-defined]  # never had a name, or lost it at once
    assert os.path.dirname(spool.seen_path) == str(tmp_path)  # type: ignore[attr-defined]
    assert sorted(os.listdir(tmp_path)) == listing


def test_the_spool_directory_can_be_chosen(
    store: VmpStore, spools: list[IO[bytes]], tmp_path: Path
) -> None:
    elsewhere = tmp_path / "spool"
    elsewhere.mkdir()
    app = build_vmp_app(store, api_key=API_KEY, spool_dir=elsewhere)
    with TestClient(app, headers=AUTH) as http:
        assert http.post(UPLOAD, content=snapshot_of(1), headers=SNAPSHOT_BODY).status_code == 200
    assert os.path.dirname(spools[0].seen_path) == str(elsewhere)  # type: ignore[attr-defined]
    assert os.listdir(elsewhere) == []


def test_a_store_in_memory_spools_to_the_temporary_directory(spools: list[IO[bytes]]) -> None:
    with open_vmp_store(":memory:", dim=DIM) as memory:
        assert memory.directory is None
        with TestClient(build_vmp_app(memory, api_key=API_KEY), headers=AUTH) as http:
            assert (
                http.post(UPLOAD, content=snapshot_of(1), headers=SNAPSHOT_BODY).status_code == 200
            )
    assert os.path.dirname(spools[0].seen_path) == os.path.realpath(tempfile.gettempdir())  # type: ignore[attr-defined]


def test_the_upload_is_restored_from_the_spool_not_from_memory(
    store: VmpStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(blob: bytes) -> None:
        raise AssertionError("the upload was held as one byte string")

    monkeypatch.setattr(store, "restore", refuse)
    blob = snapshot_of(3)
    with TestClient(build_vmp_app(store, api_key=API_KEY), headers=AUTH) as http:
        assert http.post(UPLOAD, content=blob, headers=SNAPSHOT_BODY).status_code == 200
        assert http.get("/v1/snapshot/download").content == blob


def test_a_full_disk_while_spooling_is_507(
    store: VmpStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = upload_module._write_all

    def no_space(spool: IO[bytes], pieces: list[bytes]) -> None:
        class Full:
            def writelines(self, pieces: list[bytes]) -> None:
                raise OSError(28, "No space left on device")

        real(Full(), pieces)  # type: ignore[arg-type]

    monkeypatch.setattr(upload_module, "_write_all", no_space)
    with TestClient(build_vmp_app(store, api_key=API_KEY), headers=AUTH) as http:
        before = state(http)
        response = http.post(UPLOAD, content=snapshot_of(2), headers=SNAPSHOT_BODY)
        assert_error(response, 507, "CAPACITY_EXCEEDED")
        assert state(http) == before


def test_error_messages_of_uploads_carry_no_content(store: VmpStore) -> None:
    secret = b"sekrit-upload-12345"
    with TestClient(
        build_vmp_app(store, api_key=API_KEY, max_snapshot_bytes=200), headers=AUTH
    ) as http:
        for payload, headers in (
            (secret * 20, SNAPSHOT_BODY),
            (secret, SNAPSHOT_BODY),
            (secret, {"Content-Type": "text/plain"}),
            (header_announcing(100) + secret * 4, SNAPSHOT_BODY),
        ):
            response = http.post(UPLOAD, content=payload, headers=headers)
            assert response.status_code in (400, 413, 415)
            assert b"sekrit" not in response.content


def test_hash_of_header_helper() -> None:
    """The helper above builds what the format says (so the tests test the format)."""
    blob = snapshot_of(2)
    assert header_announcing(len(blob)) == blob[:20]
    assert hashlib.sha256(blob[:-32]).digest() == blob[-32:]
