"""Snapshot uploads over a real socket: refused early, spooled to disk, never buffered.

A uvicorn process serves the app without a key (the loopback default, where the
red-team's 1 GiB upload needed no credentials). Its peak RSS (VmHWM) is read
from /proc before and after each large upload: streaming 200 MB must grow it by
far less than the upload (it grew by twice the upload when the body was held).
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ratatoskr.provider.testing import ServerProcess, start_app
from ratatoskr.vmp import open_vmp_store, snapshot_size_limit
from ratatoskr.vmp.client import VmpClient
from ratatoskr.vmp.snapshot import MAGIC

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc"),
]

DIM = 16
MIB = 1 << 20
CAP = 256 * MIB
UPLOAD_SIZE = 200 * MIB
# Far less than the 200 MB upload; a buffered body grew the peak by ~400 MB.
MAX_GROWTH = 64 * MIB
WORKER = Path(__file__).with_name("upload_server.py")


@dataclass
class Server:
    process: ServerProcess
    directory: Path

    @property
    def url(self) -> str:
        return self.process.base_url

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def pid(self) -> int:
        return self.process.pid


def serve(directory: Path, cap: str) -> Iterator[Server]:
    directory.mkdir()
    db = str(directory / "vmp.db")
    with start_app(f"{WORKER}:build", [db, cap], cwd=directory.parent) as process:
        yield Server(process, directory)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = next_server = serve(tmp_path_factory.mktemp("http") / "capped", str(CAP))
    server = next(next_server)
    # Warm up (worker threads, imports, first spool) so the baseline is the steady state.
    with VmpClient(server.url) as client:
        client.restore(snapshot(3))
    yield server
    for _ in s:
        pass


@pytest.fixture(scope="module")
def default_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serve(tmp_path_factory.mktemp("http") / "default", "default")


def snapshot(records: int) -> bytes:
    with open_vmp_store(":memory:", dim=DIM) as source:
        rng = random.Random(records)
        for i in range(records):
            vector = [rng.uniform(-100, 100) for _ in range(DIM)]
            source.upsert_vector(vector, tags=[f"t{i % 7}"], metadata={"i": i, "note": "ü" * 20})
        return source.snapshot()


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def open_spools(server: Server) -> list[str]:
    """Files the server holds open that no longer have a name (where a spool would show)."""
    found = []
    for fd in os.listdir(f"/proc/{server.pid}/fd"):
        if int(fd) <= 2:
            continue  # stdio, inherited: pytest captures it in an unnamed temporary file
        try:
            target = os.readlink(f"/proc/{server.pid}/fd/{fd}")
        except OSError:
            continue
        if target.endswith("(deleted)"):
            found.append(target)
    return found


def header_announcing(total: int) -> bytes:
    return struct.pack("<8sHHQ", MAGIC, 1, 0, total - 52)


def garbage(total: int, start: bytes = b"") -> Iterator[bytes]:
    """``total`` bytes: ``start``, then one random MiB over and over (cheap to send)."""
    block = random.Random(total).randbytes(MIB)
    yield start
    left = total - len(start)
    while left > 0:
        yield block[: min(left, MIB)]
        left -= MIB


@dataclass
class Answer:
    status: int
    body: Any
    sent: int  # body bytes the client had sent when the answer was read


def post(
    server: Server,
    body: Iterator[bytes] | None,
    *,
    content_type: str = "application/octet-stream",
    length: int | None = None,
    extra: str = "",
    path: str = "/v1/snapshot/upload",
) -> Answer:
    """A raw HTTP/1.1 POST: ``body`` chunked unless ``length`` is given (None: only the
    head is sent). The body goes out from a thread while the answer is read, which
    stops the sending: an early refusal is seen as early as it comes."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    framing = "Transfer-Encoding: chunked" if length is None else f"Content-Length: {length}"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        f"Content-Type: {content_type}\r\n{framing}\r\n{extra}\r\n"
    )
    sock.sendall(head.encode())
    answered = threading.Event()
    sent = 0

    def send() -> None:
        nonlocal sent
        assert body is not None
        try:
            for piece in body:
                if answered.is_set():
                    return
                if not piece:
                    continue  # an empty chunk would end a chunked body
                framed = piece if length is not None else b"%x\r\n%s\r\n" % (len(piece), piece)
                sock.sendall(framed)
                sent += len(piece)
            if length is None:
                sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server may close once it has answered

    sender = threading.Thread(target=send, daemon=True)
    if body is not None:
        sender.start()
    try:
        raw = b""
        while b"\r\n\r\n" not in raw:
            chunk = sock.recv(65536)
            assert chunk, "connection closed without an answer"
            raw += chunk
        at_answer = sent
        answered.set()
        head_bytes, _, rest = raw.partition(b"\r\n\r\n")
        lines = head_bytes.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        size = next(
            int(v)
            for k, _, v in (h.partition(": ") for h in lines[1:])
            if k.lower() == "content-length"
        )
        while len(rest) < size:
            rest += sock.recv(65536)
        return Answer(status, json.loads(rest[:size]), at_answer)
    finally:
        answered.set()
        sock.close()
        if body is not None:
            sender.join(timeout=30)


def state_hash(server: Server) -> str:
    with VmpClient(server.url) as client:
        return client.state_hash()


# -- refused before the body -----------------------------------------------------------


@pytest.mark.parametrize("expect", ["", "Expect: 100-continue\r\n"])
def test_a_content_length_above_the_cap_is_answered_before_the_body_is_sent(
    server: Server, expect: str
) -> None:
    answer = post(server, None, length=CAP + 1, extra=expect)
    assert (answer.status, answer.body["code"], answer.sent) == (413, "INVALID_ARGUMENT", 0)
    assert str(CAP) in answer.body["error"]


def test_the_derived_default_cap_over_http(default_server: Server) -> None:
    cap = snapshot_size_limit(1_000_000, DIM)
    assert cap == 2_159_000_076
    answer = post(default_server, None, length=cap + 1)
    assert (answer.status, answer.body["code"]) == (413, "INVALID_ARGUMENT")
    # At the cap the server waits for the body instead (nothing comes: no answer yet).
    sock = socket.create_connection(("127.0.0.1", default_server.port), timeout=1)
    with sock:
        sock.sendall(
            b"POST /v1/snapshot/upload HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n" % cap
        )
        with pytest.raises(TimeoutError):
            sock.recv(1)


# -- streamed bodies: memory stays flat ----------------------------------------------------


def test_streamed_garbage_is_refused_and_memory_stays_flat(server: Server) -> None:
    before = peak_rss(server.pid)
    answer = post(server, garbage(UPLOAD_SIZE))
    assert (answer.status, answer.body["code"]) == (400, "INVALID_ARGUMENT")
    assert "not a ratatoskr VMP snapshot" in answer.body["error"]
    assert peak_rss(server.pid) - before < MAX_GROWTH


@pytest.mark.parametrize("framing", ["chunked", "content-length"])
def test_a_200_mb_upload_is_spooled_to_disk_not_held(server: Server, framing: str) -> None:
    """A header announcing 200 MB lets the whole body in: it is spooled, checksummed in
    the file, refused, and the spool is gone."""
    digest = state_hash(server)
    listing = sorted(os.listdir(server.directory))
    before = peak_rss(server.pid)
    body = garbage(UPLOAD_SIZE, header_announcing(UPLOAD_SIZE))
    length = UPLOAD_SIZE if framing == "content-length" else None
    answer = post(server, body, length=length)
    assert (answer.status, answer.body["code"]) == (400, "INVALID_ARGUMENT")
    assert "checksum" in answer.body["error"]
    assert answer.sent == UPLOAD_SIZE  # refused only once all of it was in
    growth = peak_rss(server.pid) - before
    print(f"peak RSS growth for a {framing} 200 MB upload: {growth / MIB:.1f} MiB")
    assert growth < MAX_GROWTH
    assert open_spools(server) == []
    assert sorted(os.listdir(server.directory)) == listing
    assert state_hash(server) == digest


def test_bytes_beyond_what_the_header_announces_are_refused_there(server: Server) -> None:
    before = peak_rss(server.pid)
    answer = post(server, garbage(UPLOAD_SIZE, header_announcing(MIB)))
    assert (answer.status, answer.body["code"]) == (400, "INVALID_ARGUMENT")
    assert "length" in answer.body["error"]
    assert peak_rss(server.pid) - before < MAX_GROWTH
    assert open_spools(server) == []


def test_a_header_announcing_more_than_the_cap_is_refused_at_once(server: Server) -> None:
    answer = post(server, garbage(UPLOAD_SIZE, header_announcing(CAP + 1)))
    assert (answer.status, answer.body["code"]) == (413, "INVALID_ARGUMENT")


# -- real snapshots ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def valid() -> bytes:
    return snapshot(3000)


def test_a_valid_snapshot_round_trips_streamed(
    server: Server, valid: bytes, tmp_path: Path
) -> None:
    with open_vmp_store(":memory:", dim=DIM) as source:
        source.restore(valid)
        expected = source.state_hash()
    path = tmp_path / "snap.bin"
    path.write_bytes(valid)
    with VmpClient(server.url) as client:
        with open(path, "rb") as file:
            client.restore(file)  # streamed with its Content-Length
        assert client.state_hash() == expected
        client.upsert_vector([1.0] * DIM)
        assert client.state_hash() != expected
        # Chunked, in odd pieces.
        pieces = [valid[i : i + 7777] for i in range(0, len(valid), 7777)]
        answer = post(server, iter(pieces))
        assert (answer.status, answer.body) == (200, {"success": True})
        assert client.state_hash() == expected
        assert client.snapshot() == valid
        hit = client.search_vector([0.0] * DIM, 3)["results"]
        assert len(hit) == 3 and hit[0]["metadata"]["note"] == "ü" * 20
    assert open_spools(server) == []


def test_a_corrupt_snapshot_leaves_the_state_untouched(server: Server, valid: bytes) -> None:
    with VmpClient(server.url) as client:
        client.restore(valid)
        digest = client.state_hash()
        records = client.health()["records"]
    for at in (30, len(valid) // 2, len(valid) - 40):
        bad = valid[:at] + bytes([valid[at] ^ 0x04]) + valid[at + 1 :]
        answer = post(server, iter([bad]), length=len(bad))
        assert (answer.status, answer.body["code"]) == (400, "INVALID_ARGUMENT")
    answer = post(server, iter([valid[:-1]]))
    assert answer.status == 400
    with VmpClient(server.url) as client:
        assert (client.state_hash(), client.health()["records"]) == (digest, records)


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
def test_the_wrong_content_type_is_refused_and_nothing_is_written(
    server: Server, valid: bytes, content_type: str
) -> None:
    with VmpClient(server.url) as client:
        client.restore(snapshot(2))
        digest, records = client.state_hash(), client.health()["records"]
    answer = post(server, iter([valid]), length=len(valid), content_type=content_type)
    assert (answer.status, answer.body["code"]) == (415, "INVALID_ARGUMENT")
    upsert = json.dumps({"vector": [1.0] * DIM}).encode()
    answer = post(
        server,
        iter([upsert]),
        length=len(upsert),
        content_type=content_type,
        path="/v1/memory/upsert_vector",
    )
    assert (answer.status, answer.body["code"]) == (415, "INVALID_ARGUMENT")
    with VmpClient(server.url) as client:
        assert (client.state_hash(), client.health()["records"]) == (digest, records)
    assert open_spools(server) == []
