"""Hostile clients over real sockets against `ratatoskr serve`: idle and slow
connections are closed after the request deadline, a full connection table makes
room for a new client by closing the connection that has waited longest, and a body
is never buffered for a caller without a valid token. Each test failed on the code
before its fix (sockets held forever; /healthz unanswered for 15 s under 256 open
files; 64 × 8 MiB bodies raised RSS by ~700 MB)."""

from __future__ import annotations

import contextlib
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil  # type: ignore[import-untyped]  # no stubs in the dev group
import pytest

from ratatoskr.provider.testing import ServerProcess

from .conftest import loopback_http, start_server

pytestmark = pytest.mark.slow
DEADLINE_S = 1.0


@pytest.fixture
def fast_deadline_env(server_env: dict[str, str]) -> dict[str, str]:
    return {**server_env, "RATATOSKR_REQUEST_TIMEOUT_S": str(DEADLINE_S)}


def _addr(server: ServerProcess) -> tuple[str, int]:
    host, port = server.base_url.removeprefix("http://").split(":")
    return host, int(port)


@contextlib.contextmanager
def _sockets(server: ServerProcess, n: int) -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.create_connection(_addr(server), timeout=5)
            opened.append(s)
        yield opened
    finally:
        for s in opened:
            s.close()


def _closed_by_server(s: socket.socket, within: float) -> bool:
    s.settimeout(within)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:  # reset
        return True


def _healthy(server: ServerProcess, timeout: float = 2.0) -> bool:
    try:
        with loopback_http(timeout=timeout) as client:
            return client.get(f"{server.base_url}/healthz").status_code == 200
    except httpx.HTTPError:
        return False


def test_idle_and_dribbling_connections_are_closed_after_the_deadline(
    fast_deadline_env: dict[str, str], tmp_path: Path
) -> None:
    server = start_server(["serve"], fast_deadline_env, tmp_path)
    try:
        with _sockets(server, 40) as idle:
            assert _healthy(server)  # bystanders are served while the idle ones wait
            start = time.monotonic()
            assert all(_closed_by_server(s, DEADLINE_S + 4) for s in idle)
            assert time.monotonic() - start < DEADLINE_S + 4
        # A request head sent one byte at a time, forever: closed at the deadline too.
        with _sockets(server, 1) as (slow,):
            head = b"POST /memory/bifrost/memory-call HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            start = time.monotonic()
            closed = False
            for byte in head:
                try:
                    slow.sendall(bytes([byte]))
                except OSError:
                    closed = True
                    break
                if _closed_by_server(slow, 0.1):
                    closed = True
                    break
            assert closed
            assert time.monotonic() - start < DEADLINE_S + 3
        # A body that never finishes (valid head, Content-Length never reached).
        with _sockets(server, 1) as (stuck,):
            stuck.sendall(
                b"POST /vmp/v1/memory/search HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Authorization: Bearer e2e-vmp-key-0123456789\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000\r\n\r\n{"
            )
            assert _closed_by_server(stuck, DEADLINE_S + 4)
        assert _healthy(server)
    finally:
        server.stop()


def _low_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


@pytest.mark.parametrize("workers", [1, 2])
def test_a_full_connection_table_still_lets_new_clients_in(
    server_env: dict[str, str], tmp_path: Path, workers: int
) -> None:
    """Under a 256 open-file limit (a cap of 192 connections per process), 300 idle
    sockets per worker — no token, no byte sent, never let go. Before the fix every
    connection past the cap was closed at once, so no /healthz was answered until the
    15 s deadline freed the table; now each new connection closes the one that has
    waited longest, and a client gets in at once while the attacker holds on."""
    server = start_server(
        ["serve", "--workers", str(workers)], server_env, tmp_path, preexec_fn=_low_fd_limit
    )
    try:
        with _sockets(server, 300 * workers) as attack:
            for _ in range(5):
                start = time.monotonic()
                assert _healthy(server, timeout=2.0)
                assert time.monotonic() - start < 2.0
            # The oldest sockets made the room; the newest are still held open.
            assert _closed_by_server(attack[0], 2.0)
            assert not _closed_by_server(attack[-1], 0.2)
    finally:
        server.stop()


def test_idle_sockets_are_still_closed_at_the_deadline_under_256_fds(
    fast_deadline_env: dict[str, str], tmp_path: Path
) -> None:
    """The same 300 sockets with a 1 s deadline: all closed by the server by then."""
    server = start_server(["serve"], fast_deadline_env, tmp_path, preexec_fn=_low_fd_limit)
    try:
        with _sockets(server, 300) as attack:
            # Each closed by the server by DEADLINE_S + 1.5 s (+0.2 s to see it): waited
            # for one after the other instead of sleeping the whole time first.
            by = time.monotonic() + DEADLINE_S + 1.5
            closed = sum(_closed_by_server(s, max(0.2, by - time.monotonic())) for s in attack)
            assert closed == len(attack)
            assert _healthy(server, timeout=5)
    finally:
        server.stop()


def test_unauthenticated_bodies_are_never_buffered(server: ServerProcess) -> None:
    """64 connections each declaring an 8 MiB body and sending all but one byte, with
    no token: answered 401 from the headers; the server's RSS barely moves."""
    proc = psutil.Process(server.proc.pid)
    before = proc.memory_info().rss
    head = (
        b"POST /memory/bifrost/memory-call HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 8388608\r\n\r\n"
    )
    chunk = b" " * (1024 * 1024)
    answers = []
    with _sockets(server, 64) as conns:
        for s in conns:
            s.sendall(head)
        for s in conns:
            s.settimeout(5)
            answers.append(s.recv(64))
        for s in conns:
            with contextlib.suppress(OSError):
                for _ in range(7):
                    s.sendall(chunk)
                s.sendall(chunk[:-1])
        peak = proc.memory_info().rss
    assert all(a.startswith(b"HTTP/1.1 401") for a in answers), answers[:3]
    assert peak - before < 64 * 1024 * 1024, (before, peak)
    assert _healthy(server)
