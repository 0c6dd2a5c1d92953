"""Request heads are bounded while they arrive (issue 22, finding 4), over real sockets
against `ratatoskr serve` with 1 and 2 workers: a head past ``RATATOSKR_MAX_HEAD_BYTES``
or ``RATATOSKR_MAX_HEADERS`` is answered 431 and closed, however it is split; a head at
exactly the caps is served; pipelined requests are each counted from their own first
byte, after a body of known length or a chunked one. Before the fix a 4 MiB header and
100,000 headers were both answered 200, and the parse cost grew quadratically."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator

import pytest

from ratatoskr.provider.testing import ServerProcess

from .conftest import start_server

pytestmark = pytest.mark.slow
CAP = 65536  # the defaults: RATATOSKR_MAX_HEAD_BYTES, RATATOSKR_MAX_HEADERS
HEADERS = 100
STATUS_LINE = re.compile(rb"HTTP/1\.1 (\d{3}) ")
HEALTH = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"


@pytest.fixture(scope="module", params=[1, 2], ids=["1-worker", "2-workers"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp(f"heads{request.param}")
    env = {
        "RATATOSKR_MEMORY_DB": str(root / "memory.db"),
        "RATATOSKR_AFFECT_DB": str(root / "affect.db"),
        "RATATOSKR_VMP_DB": str(root / "vmp.db"),
        "RATATOSKR_MEMORY_EMBEDDING_DIM": "8",
        "RATATOSKR_HEIMDALL_KEY": "h" * 32,
        "RATATOSKR_PORT": "0",
    }
    server = start_server(["serve", "--workers", str(request.param)], env, root)
    yield server
    server.stop()
    server.close()


def _connect(server: ServerProcess) -> socket.socket:
    host, port = server.base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _exchange(server: ServerProcess, *pieces: bytes, pause: float = 0.0) -> tuple[list[int], bool]:
    """Send ``pieces`` (``pause`` apart, so the server reads them apart), then read until
    the server closes or goes quiet; the statuses answered, and whether it closed."""
    with _connect(server) as sock:
        try:
            for piece in pieces:
                sock.sendall(piece)
                if pause:
                    time.sleep(pause)
        except OSError:  # refused while still sending: the answer is already waiting
            pass
        received = b""
        closed = False
        sock.settimeout(3)
        try:
            while chunk := sock.recv(65536):
                received += chunk
            closed = True
        except TimeoutError:
            pass
        except OSError:
            closed = True
    # Bodies here are short text or JSON: no status line inside one.
    return [int(status) for status in STATUS_LINE.findall(received)], closed


def _head(size: int, *, close: bool = False) -> bytes:
    """A /healthz request head of exactly ``size`` bytes (one padding header)."""
    start = HEALTH + (b"Connection: close\r\n" if close else b"")
    pad = size - len(start) - len(b"X-Pad: \r\n\r\n")
    head = start + b"X-Pad: " + b"p" * pad + b"\r\n\r\n"
    assert len(head) == size
    return head


def _many_headers(count: int) -> bytes:
    """A /healthz head with ``count`` header lines (Host and Connection among them)."""
    return HEALTH + b"Connection: close\r\n" + b"X-H: v\r\n" * (count - 2) + b"\r\n"


def test_an_oversized_head_is_refused_431_and_closed(served: ServerProcess) -> None:
    mib = HEALTH + b"X-Big: " + b"b" * (1024 * 1024) + b"\r\n\r\n"
    assert _exchange(served, mib) == ([431], True)
    # The same megabyte in 4 KiB reads: refused once the cap is passed, not at the end.
    pieces = [mib[i : i + 4096] for i in range(0, 20 * 4096, 4096)]
    assert _exchange(served, *pieces, pause=0.002) == ([431], True)
    # Over by one byte, and the blank line split across two reads.
    over = _head(CAP + 1)
    assert _exchange(served, over[:-2], over[-2:], pause=0.05) == ([431], True)


def test_too_many_headers_are_refused_431_and_closed(served: ServerProcess) -> None:
    assert _exchange(served, _many_headers(10_000)) == ([431], True)
    assert _exchange(served, _many_headers(HEADERS + 1)) == ([431], True)
    assert _exchange(served, _many_headers(HEADERS)) == ([200], True)


def test_heads_at_the_cap_are_served(served: ServerProcess) -> None:
    head = _head(CAP, close=True)
    assert _exchange(served, head) == ([200], True)
    # In pieces, with the blank line split over reads at each of its three joints.
    for cut in (1, 2, 3):
        assert _exchange(served, head[:-cut], head[-cut:], pause=0.05) == ([200], True)
    many = [head[i : i + 1000] for i in range(0, len(head), 1000)]
    assert _exchange(served, *many, pause=0.001) == ([200], True)


def test_pipelined_requests_are_each_counted_from_their_first_byte(served: ServerProcess) -> None:
    body = b"x" * 200_000  # a body of known length: skipped exactly, never counted as head
    post = b"POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n" % len(body)
    statuses, closed = _exchange(served, post + body + _head(CAP) + _head(CAP, close=True))
    assert statuses[1:] == [200, 200] and closed, statuses
    # A chunked body, then a head at the cap; then the same with one byte more.
    chunked = b"POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunks = b"%x\r\n%s\r\n0\r\n\r\n" % (50_000, b"y" * 50_000)
    statuses, closed = _exchange(served, chunked + chunks + _head(CAP, close=True))
    assert statuses[1:] == [200] and closed, statuses
    statuses, closed = _exchange(served, chunked + chunks + _head(CAP + 1))
    assert statuses[1:] == [431] and closed, statuses
    # Requests already received are answered before the refusal of the one after them.
    big = HEALTH + b"X-Big: " + b"b" * (1024 * 1024) + b"\r\n\r\n"
    assert _exchange(served, HEALTH + b"\r\n" + HEALTH + b"\r\n" + big) == ([200, 200, 431], True)
    assert _exchange(served, _head(1024, close=True)) == ([200], True)  # and serves on
