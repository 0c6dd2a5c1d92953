"""Fixtures: the bundled embedder (loaded once per session) and a fake OpenAI-compatible
embeddings server on loopback whose answers each test scripts."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ratatoskr.embed import BundledEmbedder


@pytest.fixture(scope="session")
def bundled() -> BundledEmbedder:
    return BundledEmbedder()


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


# (status, body bytes, delay seconds) for one request body.
Answer = Callable[[dict[str, Any]], tuple[int, bytes, float]]


def vectors_answer(dim: int = 4, *, reverse: bool = False) -> Answer:
    """An answer of one distinct, unnormalised vector per input (index i → [i+1, 1, 1, …])."""

    def answer(body: dict[str, Any]) -> tuple[int, bytes, float]:
        items = [
            {"object": "embedding", "index": i, "embedding": [float(i + 1)] + [1.0] * (dim - 1)}
            for i in range(len(body["input"]))
        ]
        if reverse:
            items.reverse()
        payload = {"object": "list", "data": items, "model": body["model"]}
        return 200, json.dumps(payload).encode(), 0.0

    return answer


@dataclass
class FakeEmbeddingsServer:
    url: str
    seen: list[Seen] = field(default_factory=list)
    answer: Answer = field(default_factory=vectors_answer)


@pytest.fixture
def fake_server() -> Iterator[FakeEmbeddingsServer]:
    state = FakeEmbeddingsServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            state.seen.append(Seen(self.path, dict(self.headers.items()), body))
            status, payload, delay = state.answer(body)
            if delay:
                time.sleep(delay)
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (the timeout test)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
