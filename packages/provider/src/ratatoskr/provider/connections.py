"""The HTTP connection protocol: uvicorn's httptools protocol with the bounds a public
listener needs (``shared/spec/bifrost-wire.md`` leaves them to the server).

- **Request heads are bounded while they arrive.** A head (request line, header lines,
  blank line) may have at most ``max_head_bytes`` bytes and ``max_headers`` header
  lines. Both are counted here, on the bytes as they come off the socket, before
  httptools sees them; a head past either is answered ``431`` and the connection
  closed, and the excess is never parsed. (httptools joins the pieces of a header
  value by repeated concatenation, so an unbounded head cost CPU quadratic in its
  size: docs/decisions.md.) The counting follows the parser's own events: a head
  ends at its blank line, a body of known ``Content-Length`` is skipped exactly, so
  pipelined requests are each counted from their first byte. A chunked body's end is
  the parser's to find, so a pipelined head that came in the same socket read is
  parsed with it (bounded by the read, 256 KiB) and measured from what the parser made
  of it before its request runs; the bytes of a head still unfinished are estimated
  from the read's last blank line.
- **Every request has a deadline.** uvicorn arms its keep-alive timer only after a
  response, so a socket that sent nothing, or dribbled a request a byte at a time,
  was held forever: each request gets ``request_timeout_s`` from its first byte (or
  from the accept, for a new connection) until its body is complete, after which the
  connection is closed; an idle keep-alive connection is closed after ``keep_alive_s``.
- **A full connection table still lets new clients in.** At most ``max_connections``
  connections are open per process (kept below the open-file limit by the caller).
  A connection with no request in flight — new and silent, sending a head, or idle
  between requests — is *waiting*; when a new connection would pass the cap, the
  connection that has been waiting longest is closed to make room. Only when every
  open connection has a request in flight is the new one closed instead. So silent
  sockets, however many, cost a client at most the time to connect. A new socket
  numbered within ``_FD_HEADROOM`` of the open-file limit makes room the same way,
  whatever the count: the planes' files or the next accept would fail next (an accept
  that fails for want of descriptors drops the queued ones unanswered).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

__all__ = ["GuardedHttpToolsProtocol", "ProviderConfig"]

_log = logging.getLogger("ratatoskr.serve")
_HEAD_END = b"\r\n\r\n"  # llhttp accepts CRLF only (bare LF and folding are 400)
# How long a refused connection stays open, and how much of what the client still
# sends it reads (and drops) meanwhile, so that a client which sends its whole head
# before reading sees the 431 rather than a reset; past that it is no longer read.
_LINGER_S = 1.0
_LINGER_BYTES = 256 * 1024
# A head's bytes beside its method, URL and header lines: " ", " HTTP/1.1\r\n", "\r\n".
_REQUEST_LINE_AND_END = 1 + 11 + 2
# Descriptors kept free below the open-file limit whatever the connection count.
_FD_HEADROOM = 32


class ProviderConfig(uvicorn.Config):
    """uvicorn's configuration plus the limits our protocol enforces (a module-level
    class, so it reaches spawned workers intact)."""

    def __init__(
        self,
        app: Any,
        *,
        request_timeout_s: float,
        max_connections: int,
        max_head_bytes: int,
        max_headers: int,
        open_file_limit: int,
        **kwargs: Any,
    ) -> None:
        super().__init__(app, **kwargs)
        self.request_timeout_s = request_timeout_s
        self.max_connections = max_connections
        self.open_file_limit = open_file_limit
        self.max_head_bytes = max_head_bytes
        self.max_headers = max_headers


# The connections of one server that have no request in flight, longest waiting first
# (a dict: ordered, O(1) to move one to the end or to drop it).
_waiting_by_server: weakref.WeakKeyDictionary[ServerState, dict[GuardedHttpToolsProtocol, None]] = (
    weakref.WeakKeyDictionary()
)


def _waiting_of(state: ServerState) -> dict[GuardedHttpToolsProtocol, None]:
    waiting = _waiting_by_server.get(state)
    if waiting is None:
        waiting = _waiting_by_server[state] = {}
    return waiting


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with bounded request heads, a deadline for receiving
    each request, and a connection cap that evicts waiting connections first (see the
    module docstring)."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self._request_timeout = float(getattr(config, "request_timeout_s", 15.0))
        self._max_connections = int(getattr(config, "max_connections", 1024))
        self._max_head_bytes = int(getattr(config, "max_head_bytes", 64 * 1024))
        self._max_headers = int(getattr(config, "max_headers", 100))
        limit = int(getattr(config, "open_file_limit", 0))
        # A new socket numbered this high means every descriptor below it is taken.
        self._crowded_fd = limit - _FD_HEADROOM if limit else 1 << 30
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting = _waiting_of(self.server_state)
        # The request head being received: True until the parser reports it complete.
        self._in_head = True
        self._head_bytes = 0
        self._head_lines = 0  # line ends seen in this head
        self._tail = b""  # its last bytes, to find a blank line split over two reads
        # Body bytes still to come at the declared Content-Length; None: chunked.
        self._body_left: int | None = 0
        # The parser is reading a chunked body, and whatever follows it in this read.
        self._unchecked = False
        # Why the head was refused; a 431 is owed once the responses in flight are sent.
        self._refused: str | None = None
        self._answered = False
        self._dropped = 0

    # Connection life

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self._crowded(transport) and not self._evict_one():
            _log.debug("connection refused: %d open, none waiting", len(self.connections) - 1)
            transport.close()
            return
        self._waiting[self] = None
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._waiting.pop(self, None)
        self._disarm()
        super().connection_lost(exc)

    def _crowded(self, transport: asyncio.Transport) -> bool:
        """Past the connection cap — or so near the open-file limit that the planes'
        files (a new reader thread) or the next accept could fail."""
        if len(self.connections) > self._max_connections:
            return True
        sock = transport.get_extra_info("socket")
        return sock is not None and sock.fileno() >= self._crowded_fd

    def _evict_one(self) -> bool:
        """Close the connection that has waited longest; False if none is waiting."""
        while self._waiting:
            oldest = next(iter(self._waiting))
            del self._waiting[oldest]
            if not oldest.transport.is_closing():
                _log.debug("connection closed to make room: no request in flight")
                oldest.transport.close()
                return True
        return False

    def _idle(self) -> bool:
        return (self.cycle is None or self.cycle.response_complete) and not self.pipeline

    # Receiving

    def data_received(self, data: bytes) -> None:
        if self._refusing():
            # The rest of a refused head, or what followed it: never parsed.
            self._dropped += len(data)
            if self._dropped > _LINGER_BYTES:
                self.flow.pause_reading()
            return
        if self._deadline is None:
            self._arm()  # the first byte of a request on a kept-alive connection
        size = len(data)
        pos = 0
        while pos < size and not self._refusing() and not self.transport.is_closing():
            chunked = False
            if self._in_head:
                take = self._take_head(data, pos)
                if take < 0:
                    break
            elif self._body_left is None:
                take = size - pos  # a chunked body: its end is the parser's to find
                chunked = True
            else:
                take = min(self._body_left, size - pos)
                if take == 0:  # the parser did not end the message where we did
                    self._body_left = None
                    continue
                self._body_left -= take
            piece = data if take == size else memoryview(data)[pos : pos + take]
            self._unchecked = chunked
            super().data_received(piece)  # type: ignore[arg-type]  # httptools reads any buffer
            self._unchecked = False
            if chunked and self._in_head:
                self._count_head_read_with_body(data, pos)
            pos += take
        if self._refusing():
            self._refuse()

    def _refusing(self) -> bool:
        return self._refused is not None  # (a call: the parser's callbacks may set it)

    def _take_head(self, data: bytes, pos: int) -> int:
        """How many bytes of ``data[pos:]`` to hand the parser as (the rest of) this head:
        up to its blank line, or all of them if it has not come yet; -1 if the head is
        past a limit (``self._refused`` says which)."""
        budget = self._max_head_bytes - self._head_bytes
        rest = len(data) - pos
        end = self._head_end(data, pos, min(rest, budget))
        take = rest if end < 0 else end
        if take > budget:
            self._refused = f"request head larger than {self._max_head_bytes} bytes"
            return -1
        self._head_lines += data.count(b"\n", pos, pos + take)
        # Complete header lines: all line ends but the request line's (and the blank one).
        if self._head_lines - (2 if end >= 0 else 1) > self._max_headers:
            self._refused = f"more than {self._max_headers} request header lines"
            return -1
        self._head_bytes += take
        self._tail = (self._tail + data[pos + max(0, take - 3) : pos + take])[-3:]
        return take

    def _head_end(self, data: bytes, pos: int, limit: int) -> int:
        """The offset from ``pos`` just past the blank line ending the head, if it lies
        within ``data[pos : pos + limit]``; else -1."""
        if self._tail:
            # A blank line begun in the previous read starts inside the 3-byte tail.
            probe = self._tail + data[pos : pos + 3]
            found = probe.find(_HEAD_END)
            if found >= 0:
                end = found + len(_HEAD_END) - len(self._tail)
                return end if end <= limit else -1
        found = data.find(_HEAD_END, pos, pos + limit)
        return -1 if found < 0 else found - pos + len(_HEAD_END)

    def _count_head_read_with_body(self, data: bytes, pos: int) -> None:
        """A chunked body ended inside this read, and what followed it was parsed with
        it. A chunked body ends with a blank line and an unfinished head holds none, so
        the head's bytes so far are at most those after the read's last blank line."""
        last = data.rfind(_HEAD_END, pos)
        start = pos if last < 0 else last + len(_HEAD_END)
        self._head_bytes = len(data) - start
        self._head_lines = data.count(b"\n", start)
        self._tail = data[max(start, len(data) - 3) :]
        if self._head_bytes > self._max_head_bytes:
            self._refused = f"request head larger than {self._max_head_bytes} bytes"
        elif self._head_lines - 1 > self._max_headers:
            self._refused = f"more than {self._max_headers} request header lines"

    def _refuse(self) -> None:
        """Answer 431 and close, after the responses to requests already received."""
        if not self._answered and self._idle():
            self._send_431()

    def _send_431(self) -> None:
        """Answer 431, end our side, and close after a short linger: closing at once with
        the client's unread head in our receive buffer would reset the connection, and
        the reset can destroy the answer before the client reads it."""
        _log.debug("request refused: %s", self._refused)
        self._answered = True
        reason = (self._refused or "request head too large").encode("ascii")
        content = [STATUS_LINE[431]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: text/plain; charset=utf-8\r\n",
                b"content-length: " + str(len(reason)).encode("ascii") + b"\r\n",
                b"connection: close\r\n",
                b"\r\n",
                reason,
            ]
        )
        self._disarm()
        self.transport.write(b"".join(content))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(_LINGER_S, self.transport.close)

    # Parser events (the parser calls these from inside data_received)

    # A head the parser read together with a chunked body, uncounted, is measured from
    # what the parser made of it (method, URL, headers; the rest of a head is fixed
    # bytes) before its request runs; it was bounded meanwhile by the read (256 KiB).

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = self._head_lines = 0
        self._tail = b""
        self._body_left = self._declared_length()
        self._waiting.pop(self, None)  # a request is in flight now
        if self._unchecked:
            self._check_parsed_head()
        if self._refused is None:
            super().on_headers_complete()  # runs the app

    def _check_parsed_head(self) -> None:
        if self._refused is not None:
            return
        size = len(self.parser.get_method()) + len(self.url) + _REQUEST_LINE_AND_END
        size += sum(len(name) + len(value) + 4 for name, value in self.headers)
        if len(self.headers) > self._max_headers:
            self._refused = f"more than {self._max_headers} request header lines"
        elif size > self._max_head_bytes:
            self._refused = f"request head larger than {self._max_head_bytes} bytes"

    def on_body(self, body: bytes) -> None:
        if self._refused is None:
            super().on_body(body)

    def _declared_length(self) -> int | None:
        length = 0
        for name, value in self.headers:
            if name == b"transfer-encoding":
                return None  # the parser refuses it beside a Content-Length
            if name == b"content-length":
                length = int(value)  # the parser has checked it (one, and digits)
        return length

    def on_message_complete(self) -> None:
        if self._refused is None:
            super().on_message_complete()
        self._disarm()
        self._in_head = True
        self._body_left = 0

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing() or not self._idle():
            return
        if self._refused is not None and not self._answered:
            self._send_431()  # owed since a head past the limits came during this response
        self._waiting.pop(self, None)
        self._waiting[self] = None  # waiting again, from now

    # The request deadline

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self._request_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            _log.debug("connection closed: request not received within the deadline")
            self.transport.close()
