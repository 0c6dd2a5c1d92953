"""Request heads as an attack (issue 22, finding 4), measured over real HTTP against a
``ratatoskr serve`` subprocess with the harness of ``test_attacks.py``: a bystander
tenant's small searches and ``/healthz`` run alone, then while 8 connections send
request heads without a token — maximal ones (exactly ``RATATOSKR_MAX_HEAD_BYTES``,
served), then oversized ones (64 MiB each, refused) — over and over for the window.

Reported (docs/reliability.md, issue 22): the bystander's p50/p99 alone and during,
the server's RSS alone and at its peak, what each head was answered and how many bytes
of an oversized head were sent before the refusal, the server's CPU seconds. Asserted:
maximal heads are served; oversized ones are refused 431 once past the cap; the
bystander never gets a 5xx; RSS stays within 64 MiB of idle (before the fix 8 heads of
64 MiB added 478 MiB).

Run: ``.venv/bin/python -m pytest -m soak tests/reliability/test_head_attacks.py -q -rA``.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]  # no stubs in the dev group
import pytest

from .support import size
from .test_attacks import Harness, addr_of, attack_env, harness, ms, percentile, publish

pytestmark = [pytest.mark.soak, pytest.mark.timeout(900)]
MIB = 1024 * 1024
CAP = 65536  # RATATOSKR_MAX_HEAD_BYTES default
PREFIX = b"POST /memory/bifrost/memory-call HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: "


def _maximal_head() -> bytes:
    """An unauthenticated call whose head is exactly the cap (answered 401)."""
    pad = CAP - len(PREFIX) - len(b"\r\nContent-Length: 0\r\n\r\n")
    head = PREFIX + b"p" * pad + b"\r\nContent-Length: 0\r\n\r\n"
    assert len(head) == CAP
    return head


class Sender(threading.Thread):
    """One attacking connection after another: each sends a head in 1 MiB writes, as
    fast as the server reads, and reads the answer as soon as there is one (as curl
    does); until ``halt``."""

    def __init__(self, addr: tuple[str, int], total: int, halt: threading.Event) -> None:
        super().__init__(daemon=True)
        self.addr = addr
        self.total = total
        self.halt = halt
        self.statuses: Counter[int] = Counter()
        self.failures: Counter[str] = Counter()  # no answer read: why
        self.sent_before_answer: list[int] = []
        self.answer_s: list[float] = []

    def _head(self) -> bytes:
        if self.total == CAP:
            return _maximal_head()
        return PREFIX + b"a" * (self.total - len(PREFIX) - 4) + b"\r\n\r\n"

    def _one(self, head: bytes) -> None:
        with socket.create_connection(self.addr, timeout=30) as sock:
            start = time.perf_counter()
            sent = 0
            status = 0
            answer = b""
            try:
                while b"\r\n" not in answer:  # the one under way finishes after halt
                    want_write = [sock] if sent < len(head) else []
                    readable, writable, _ = select.select([sock], want_write, [], 30)
                    if readable:
                        piece = sock.recv(4096)
                        if not piece:
                            break
                        answer += piece
                    elif writable:
                        sent += sock.send(head[sent : sent + MIB])
                status = int(answer.split(b"\r\n", 1)[0].split(b" ")[1])
            except (OSError, ValueError, IndexError) as exc:
                self.failures[type(exc).__name__] += 1
        self.statuses[status] += 1
        self.sent_before_answer.append(sent)
        self.answer_s.append(time.perf_counter() - start)

    def run(self) -> None:
        head = self._head()
        while not self.halt.is_set():
            self._one(head)


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of the server and its workers so far."""
    total = 0.0
    for proc in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
        times = proc.cpu_times()
        total += times.user + times.system
    return total


def _flood(h: Harness, total: int, seconds: float) -> dict[str, Any]:
    halt = threading.Event()
    senders = [Sender(addr_of(h.server), total, halt) for _ in range(8)]
    cpu_before = cpu_seconds(h.pid)
    with h.attack():
        for s in senders:
            s.start()
        time.sleep(seconds)
        halt.set()
        for s in senders:
            s.join(60)
    statuses: Counter[int] = Counter()
    failures: Counter[str] = Counter()
    for s in senders:
        statuses.update(s.statuses)
        failures.update(s.failures)
    answers = [t for s in senders for t in s.answer_s]
    sent = [b for s in senders for b in s.sent_before_answer]
    return {
        "heads": sum(statuses.values()),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "no_answer": dict(failures),
        "server_cpu_s": round(cpu_seconds(h.pid) - cpu_before, 2),
        "answer_p50_ms": ms(percentile(answers, 50)),
        "answer_max_ms": ms(max(answers, default=0.0)),
        "bytes_sent_before_answer_max": max(sent, default=0),
    }


def test_8_maximal_then_8_oversized_request_heads(tmp_path: Path) -> None:
    seconds = size("attack_heads_seconds", 10, 10, soaking=True)
    huge = size("attack_head_bytes", 64 * MIB, 64 * MIB, soaking=True)
    with harness(tmp_path, attack_env(tmp_path), fresh=False) as h:
        maximal = _flood(h, CAP, seconds)
        tried = {"connections": 8, "head_bytes": CAP, "auth": "none", "seconds": seconds}
        figures = h.figures(tried, maximal)
        publish("22-4-maximal-heads", figures)
        h.must_hold()
        assert set(maximal["statuses"]) == {"401"}, maximal
        h.next_round()
        oversized = _flood(h, huge, seconds)
        tried = {"connections": 8, "head_bytes": huge, "auth": "none", "seconds": seconds}
        figures = h.figures(tried, oversized)
        publish("22-4-oversized-heads", figures)
        h.must_hold()
        assert set(oversized["statuses"]) == {"431"}, oversized
        # Refused once the cap was passed, not at the end: what was sent by then is the
        # sockets' buffers (a few MiB), far short of the head.
        assert oversized["bytes_sent_before_answer_max"] < huge // 4, oversized
        rss = figures["rss_mb"]
        assert rss["peak_during"] - rss["alone"] < 64, rss
