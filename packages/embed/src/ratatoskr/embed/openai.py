"""An OpenAI-compatible embeddings endpoint (OpenAI itself, vLLM, llama.cpp, Ollama, TEI, …).

``POST {base_url}/embeddings`` with ``{"model", "input", "encoding_format": "float"}``; the
answer's ``data[i].embedding`` are put back in input order by ``data[i].index``. Errors say
what went wrong (unreachable, an HTTP status, a malformed answer) and never repeat the
response body, the URL or the key.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import httpx
from pydantic import SecretStr

from ratatoskr.embed.errors import (
    EmbedderConfigError,
    EmbedderRequestFailed,
    EmbedderResponseInvalid,
)
from ratatoskr.embed.vectors import batches, check_text, check_texts, e5_prefixes, unit_rows


class OpenAIEmbedder:
    """``RATATOSKR_EMBEDDER=openai``: vectors from an OpenAI-compatible ``/embeddings``.

    ``dim`` may be declared; when it is not, the first call that needs it asks the server once
    (one query) and every later answer must have that many components. ``query_prefix`` and
    ``passage_prefix`` default to e5's for an e5 model name and to nothing otherwise.
    Raises ``EmbedderConfigError`` for a missing URL or model.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: SecretStr | None = None,
        dim: int | None = None,
        timeout: float = 30.0,
        batch_size: int = 64,
        query_prefix: str | None = None,
        passage_prefix: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not base_url:
            raise EmbedderConfigError("the openai embedder needs RATATOSKR_EMBEDDER_URL")
        if not model:
            raise EmbedderConfigError("the openai embedder needs RATATOSKR_EMBEDDER_MODEL")
        if dim is not None and dim < 1:
            raise EmbedderConfigError("RATATOSKR_EMBEDDER_DIM must be at least 1")
        if batch_size < 1:
            raise EmbedderConfigError("the batch size must be at least 1")
        if not math.isfinite(timeout) or timeout <= 0:
            raise EmbedderConfigError("RATATOSKR_EMBEDDER_TIMEOUT must be a positive number")
        self._model = model
        self._dim = dim
        self._batch_size = batch_size
        default_query, default_passage = e5_prefixes(model)
        self._query_prefix = default_query if query_prefix is None else query_prefix
        self._passage_prefix = default_passage if passage_prefix is None else passage_prefix
        headers = {"Accept": "application/json"}
        if api_key is not None and api_key.get_secret_value():
            headers["Authorization"] = f"Bearer {api_key.get_secret_value()}"
        self._client = httpx.Client(
            base_url=base_url.rstrip("/") + "/",
            headers=headers,
            timeout=timeout,
            transport=transport,
        )

    @property
    def name(self) -> str:
        """``openai:<model>``."""
        return f"openai:{self._model}"

    @property
    def dim(self) -> int:
        """The declared dimension, or the one the server's first answer had.

        Undeclared and not yet seen, it costs one request (of one short query).
        """
        if self._dim is None:
            self._embed([self._query_prefix + "dimension probe"])
        assert self._dim is not None  # _embed learnt it or raised
        return self._dim

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """One request per ``batch_size`` texts, each with the passage prefix."""
        items = [self._passage_prefix + text for text in check_texts(texts)]
        out: list[list[float]] = []
        for batch in batches(items, self._batch_size):
            out.extend(self._embed(batch))
        return out

    def embed_query(self, text: str) -> list[float]:
        """One request, with the query prefix."""
        return self._embed([self._query_prefix + check_text(text)])[0]

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def __enter__(self) -> OpenAIEmbedder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _embed(self, batch: list[str]) -> list[list[float]]:
        rows = self._request(batch)
        if self._dim is not None:
            return unit_rows(rows, count=len(batch), dim=self._dim)
        # Undeclared: the first answer decides, once it is a valid answer.
        vectors = unit_rows(rows, count=len(batch), dim=len(rows[0]))
        self._dim = len(vectors[0])
        return vectors

    def _request(self, batch: list[str]) -> list[list[Any]]:
        body = {"model": self._model, "input": batch, "encoding_format": "float"}
        try:
            response = self._client.post("embeddings", json=body)
        except httpx.TimeoutException:
            raise EmbedderRequestFailed("the embeddings endpoint did not answer in time") from None
        except httpx.HTTPError as exc:
            raise EmbedderRequestFailed(
                f"the embeddings endpoint could not be reached ({type(exc).__name__})"
            ) from None
        if response.status_code >= 400:
            raise EmbedderRequestFailed(
                f"the embeddings endpoint answered HTTP {response.status_code}",
                status=response.status_code,
            )
        try:
            payload = response.json()
        except ValueError:
            raise EmbedderResponseInvalid("the embeddings endpoint answered with no JSON") from None
        return _rows_in_order(payload, len(batch))


def _rows_in_order(payload: Any, count: int) -> list[list[Any]]:
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list) or len(data) != count:
        raise EmbedderResponseInvalid(
            f"the embeddings endpoint did not answer with {count} embeddings"
        )
    rows: list[list[Any] | None] = [None] * count
    for item in data:
        index = item.get("index") if isinstance(item, dict) else None
        embedding = item.get("embedding") if isinstance(item, dict) else None
        if (
            type(index) is not int
            or not 0 <= index < count
            or rows[index] is not None
            or not isinstance(embedding, list)
        ):
            raise EmbedderResponseInvalid(
                "the embeddings endpoint answered with an entry that is not "
                "{index, embedding: [numbers]} for a text it was sent"
            )
        rows[index] = embedding
    return [row for row in rows if row is not None]
