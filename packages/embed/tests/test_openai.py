"""The OpenAI-compatible adapter against a fake embeddings server on loopback."""

from __future__ import annotations

import json
import socket
from typing import Any

import numpy as np
import pytest
from pydantic import SecretStr

from ratatoskr.embed import (
    Embedder,
    EmbedderConfigError,
    EmbedderRequestFailed,
    EmbedderResponseInvalid,
    OpenAIEmbedder,
)

from .conftest import FakeEmbeddingsServer, vectors_answer

KEY = "sk-test-0123456789"


def embedder(server: FakeEmbeddingsServer, **kwargs: Any) -> OpenAIEmbedder:
    kwargs.setdefault("model", "text-embedding-3-small")
    return OpenAIEmbedder(base_url=server.url, **kwargs)


def test_posts_to_embeddings_and_returns_unit_vectors_in_input_order(
    fake_server: FakeEmbeddingsServer,
) -> None:
    fake_server.answer = vectors_answer(dim=4, reverse=True)  # data in reverse index order
    with embedder(fake_server, api_key=SecretStr(KEY), dim=4) as client:
        assert isinstance(client, Embedder)
        assert client.name == "openai:text-embedding-3-small"
        vectors = client.embed_documents(["first", "second", "third"])
    (seen,) = fake_server.seen
    assert seen.path == "/v1/embeddings"
    assert seen.headers["Authorization"] == f"Bearer {KEY}"
    assert seen.body == {
        "model": "text-embedding-3-small",
        "input": ["first", "second", "third"],
        "encoding_format": "float",
    }
    for i, vector in enumerate(vectors):
        expected = np.array([i + 1.0, 1.0, 1.0, 1.0])
        assert np.allclose(vector, expected / np.linalg.norm(expected))
        assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-12


def test_batches_are_separate_requests_in_order(fake_server: FakeEmbeddingsServer) -> None:
    client = embedder(fake_server, dim=4, batch_size=2)
    vectors = client.embed_documents([f"t{i}" for i in range(5)])
    assert [s.body["input"] for s in fake_server.seen] == [["t0", "t1"], ["t2", "t3"], ["t4"]]
    # The server numbers from 0 within each request: rows 0,1 | 0,1 | 0.
    firsts = [round(v[0] / v[1]) for v in vectors]
    assert firsts == [1, 2, 1, 2, 1]
    assert client.embed_documents([]) == []
    assert len(fake_server.seen) == 3  # no request for nothing


def test_e5_models_get_query_and_passage_prefixes(fake_server: FakeEmbeddingsServer) -> None:
    client = embedder(fake_server, model="intfloat/multilingual-e5-small", dim=4)
    client.embed_documents(["a memory"])
    client.embed_query("a question")
    plain = embedder(fake_server, dim=4)
    plain.embed_documents(["a memory"])
    plain.embed_query("a question")
    custom = embedder(fake_server, dim=4, query_prefix="Q> ", passage_prefix="")
    custom.embed_query("a question")
    assert [s.body["input"] for s in fake_server.seen] == [
        ["passage: a memory"],
        ["query: a question"],
        ["a memory"],
        ["a question"],
        ["Q> a question"],
    ]


def test_no_key_sends_no_authorization(fake_server: FakeEmbeddingsServer) -> None:
    embedder(fake_server, dim=4, api_key=SecretStr("")).embed_query("x")
    embedder(fake_server, dim=4).embed_query("x")
    assert all("Authorization" not in s.headers for s in fake_server.seen)


def test_undeclared_dim_is_learnt_from_the_first_answer(
    fake_server: FakeEmbeddingsServer,
) -> None:
    fake_server.answer = vectors_answer(dim=6)
    client = embedder(fake_server)
    assert client.dim == 6  # one probe request
    assert len(fake_server.seen) == 1
    assert len(client.embed_query("x")) == 6
    fake_server.answer = vectors_answer(dim=5)  # the server changes its model under us
    with pytest.raises(EmbedderResponseInvalid, match="1 vectors of 5 where 1 vectors of 6"):
        client.embed_query("x")

    learner = embedder(fake_server)
    assert len(learner.embed_documents(["a", "b"])[0]) == 5
    assert learner.dim == 5
    assert len(fake_server.seen) == 4  # no probe: the first answer taught it


def test_declared_dim_that_the_server_does_not_match(fake_server: FakeEmbeddingsServer) -> None:
    with pytest.raises(EmbedderResponseInvalid, match="where 2 vectors of 8"):
        embedder(fake_server, dim=8).embed_documents(["a", "b"])


def test_http_errors_are_typed_and_echo_nothing(fake_server: FakeEmbeddingsServer) -> None:
    secret_body = b'{"error": {"message": "invalid key sk-test-0123456789 for user alice"}}'
    for status in (401, 429, 500):

        def answer(body: dict[str, Any], status: int = status) -> tuple[int, bytes, float]:
            return status, secret_body, 0.0

        fake_server.answer = answer
        with pytest.raises(EmbedderRequestFailed) as caught:
            embedder(fake_server, api_key=SecretStr(KEY), dim=4).embed_documents(["private"])
        error = caught.value
        assert error.status == status
        assert str(status) in str(error)
        for leak in (KEY, "alice", "invalid key", "private", fake_server.url, "127.0.0.1"):
            assert leak not in str(error)
            assert leak not in repr(error)
        assert error.__cause__ is None and error.__context__ is None  # no chained body


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (b"<html>bad gateway</html>", "no JSON"),
        (b'{"data": []}', "did not answer with 2 embeddings"),
        (b'["not", "an", "object"]', "did not answer with 2 embeddings"),
        (
            json.dumps({"data": [{"index": 0, "embedding": [1, 0]}] * 2}).encode(),
            "not .index, embedding",
        ),
        (
            json.dumps(
                {"data": [{"index": 0, "embedding": [1, 0]}, {"index": 2, "embedding": [1, 0]}]}
            ).encode(),
            "not .index, embedding",
        ),
        (
            json.dumps(
                {"data": [{"index": 0, "embedding": "AAAA"}, {"index": 1, "embedding": [1, 0]}]}
            ).encode(),
            "not .index, embedding",
        ),
        (
            json.dumps(
                {"data": [{"index": 0, "embedding": [0, 0]}, {"index": 1, "embedding": [1, 0]}]}
            ).encode(),
            "all-zero",
        ),
        (
            b'{"data": [{"index": 0, "embedding": [NaN, 1]}, {"index": 1, "embedding": [1, 0]}]}',
            "not finite",
        ),
        (
            json.dumps(
                {"data": [{"index": 0, "embedding": ["a", 1]}, {"index": 1, "embedding": [1, 0]}]}
            ).encode(),
            "not numbers",
        ),
    ],
)
def test_malformed_answers_are_refused(
    fake_server: FakeEmbeddingsServer, payload: bytes, match: str
) -> None:
    fake_server.answer = lambda body: (200, payload, 0.0)
    with pytest.raises(EmbedderResponseInvalid, match=match) as caught:
        embedder(fake_server, dim=2).embed_documents(["a", "b"])
    assert "bad gateway" not in str(caught.value)


def test_unreachable_and_slow_endpoints(fake_server: FakeEmbeddingsServer) -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    closed = OpenAIEmbedder(base_url=f"http://127.0.0.1:{port}/v1", model="m", dim=4)
    with pytest.raises(EmbedderRequestFailed, match="could not be reached") as caught:
        closed.embed_query("x")
    assert caught.value.status is None
    assert str(port) not in str(caught.value)

    fake_server.answer = lambda body: (200, b"{}", 2.0)
    slow = embedder(fake_server, dim=4, timeout=0.2)
    with pytest.raises(EmbedderRequestFailed, match="in time"):
        slow.embed_query("x")


def test_settings_it_cannot_work_with() -> None:
    with pytest.raises(EmbedderConfigError, match="RATATOSKR_EMBEDDER_URL"):
        OpenAIEmbedder(base_url="", model="m")
    with pytest.raises(EmbedderConfigError, match="RATATOSKR_EMBEDDER_MODEL"):
        OpenAIEmbedder(base_url="http://127.0.0.1:1", model="")
    with pytest.raises(EmbedderConfigError, match="DIM"):
        OpenAIEmbedder(base_url="http://127.0.0.1:1", model="m", dim=0)
    with pytest.raises(EmbedderConfigError, match="batch size"):
        OpenAIEmbedder(base_url="http://127.0.0.1:1", model="m", batch_size=0)
    with pytest.raises(EmbedderConfigError, match="TIMEOUT"):
        OpenAIEmbedder(base_url="http://127.0.0.1:1", model="m", timeout=float("nan"))
