"""A synchronous Python client for a VMP v0 server (ratatoskr's plane or any other).

``mem.upsert_text`` and ``mem.search_text`` run here, as VMP v0 says: the
client chunks the text, embeds each chunk with a pluggable ``embed`` function
and calls the vector routes. Every failure is raised as a
:class:`ratatoskr.vmp.errors.VmpError` — the typed subclass for the codes of
the spec (``NotFound``, ``DimMismatch``, …), ``Unauthenticated`` for 401 and
``Unavailable`` (status 0) when the server cannot be reached, and
:class:`WrongBaseURL` when the server has no VMP route under the base URL.
"""

from __future__ import annotations

import functools
import json
import math
import os
import ssl
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any, TypedDict, Unpack, cast

import httpx

from ratatoskr.vmp.chunking import DEFAULT_CHUNK_CHARS, chunk_text
from ratatoskr.vmp.errors import (
    InvalidArgument,
    Unauthenticated,
    Unavailable,
    VmpError,
    error_from_wire,
)
from ratatoskr.vmp.interface import ClosesOnExit, UpsertOptions, upsert_fields

# Embedders may return any iterable of numbers (a list, a numpy array, …).
EmbedFn = Callable[[str], Iterable[float]]
_STREAM_CHUNK = 1 << 20


class WrongBaseURL(VmpError):
    """A plain 404 (no VMP error body): the server has no VMP route at that path, so
    the base URL is wrong (``…/vmp`` on a combined server, the root of a standalone one)."""

    def __init__(self, path: str) -> None:
        super().__init__(
            "WRONG_BASE_URL",
            404,
            f"no VMP route at {path} (HTTP 404): the base URL is wrong - it must end in "
            "/vmp on a combined ratatoskr server (the root for a standalone VMP server)",
        )
        self.path = path


class UpsertVectorResponse(TypedDict):
    memory_id: str
    record_id: int
    document_node_id: int
    chunk_node_id: int


class SearchResult(TypedDict):
    memory_id: str
    record_id: int
    score: float
    metadata: Any


class SearchResponse(TypedDict):
    results: list[SearchResult]


class UpsertTextResponse(TypedDict):
    memory_ids: list[str]
    record_ids: list[int]
    document_node_id: int
    chunk_node_ids: list[int]
    chunk_count: int


class HealthResponse(TypedDict):
    status: str
    dim: int
    records: int


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default TLS context, made once per process and shared by every client
    (httpx makes one per client otherwise: 30-40 ms of CPU loading the CA bundle, for
    an ``http://`` URL too). As bifrost.httpclient.tls_context; VMP does not depend on
    bifrost."""
    return httpx.create_ssl_context()


class VmpClient(ClosesOnExit):
    """Talks to the VMP routes under ``base_url`` (e.g. ``http://127.0.0.1:8765/vmp``).

    ``transport`` replaces httpx's network transport (tests pass one that calls
    the app in-process). ``embed`` is the default embedding function of the text
    operations. Use as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        embed: EmbedFn | None = None,
        timeout: float = 30.0,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key is not None else {}
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers=headers,
            transport=transport,
            timeout=timeout,
            verify=_tls_context(),
        )
        self._embed = embed

    def close(self) -> None:
        """Close the HTTP connections. Idempotent."""
        self._http.close()

    # -- vector operations ----------------------------------------------------

    def upsert_vector(
        self, vector: Iterable[float], **options: Unpack[UpsertOptions]
    ) -> UpsertVectorResponse:
        """``mem.upsert_vector``; ``options``: ``attach_to_document_node``, ``tags``,
        ``metadata`` (:class:`~ratatoskr.vmp.interface.UpsertOptions`).

        Raises DimMismatch, InvalidArgument, NotFound (unknown document), CapacityExceeded;
        TypeError for another keyword.
        """
        attach_to_document_node, tags, metadata = upsert_fields(options)
        payload: dict[str, Any] = {"vector": _numbers(vector)}
        if attach_to_document_node is not None:
            payload["attach_to_document_node"] = attach_to_document_node
        if tags is not None:
            payload["tags"] = list(tags)
        if metadata is not None:
            payload["metadata"] = metadata
        return cast(UpsertVectorResponse, self._post_json("/v1/memory/upsert_vector", payload))

    def search_vector(self, query_vector: Iterable[float], k: int = 5) -> SearchResponse:
        """``mem.search_vector``: the k nearest records, ascending score, ties by record_id."""
        payload = {"query_vector": _numbers(query_vector), "k": k}
        return cast(SearchResponse, self._post_json("/v1/memory/search_vector", payload))

    # -- text operations (client-side) ----------------------------------------

    def upsert_text(
        self,
        text: str,
        *,
        embed: EmbedFn | None = None,
        tags: Sequence[str] | None = None,
        metadata: Any = None,
        chunk_size: int = DEFAULT_CHUNK_CHARS,
    ) -> UpsertTextResponse:
        """``mem.upsert_text``: chunk, embed every chunk, then upsert them as one document.

        The first chunk creates the document node, the others attach to it; each
        chunk's record gets ``tags`` and ``metadata``. All chunks are embedded
        before anything is written; VMP v0 has no batch, so a failure part-way
        leaves the chunks already stored. Raises ValueError for text without
        content or no embed function, and the VmpErrors of :meth:`upsert_vector`.
        """
        embed_fn = self._embed_fn(embed)
        chunks = chunk_text(text, max_chars=chunk_size)
        if not chunks:
            raise ValueError("text has no content to store")
        vectors = [_numbers(embed_fn(chunk)) for chunk in chunks]
        document: int | None = None
        record_ids: list[int] = []
        chunk_node_ids: list[int] = []
        for vector in vectors:
            result = self.upsert_vector(
                vector, attach_to_document_node=document, tags=tags, metadata=metadata
            )
            if document is None:
                document = result["document_node_id"]
            elif result["document_node_id"] != document:
                raise VmpError("INTERNAL_ERROR", 200, "server attached a chunk to another document")
            record_ids.append(result["record_id"])
            chunk_node_ids.append(result["chunk_node_id"])
        assert document is not None
        return {
            "memory_ids": [f"rec:{record_id}" for record_id in record_ids],
            "record_ids": record_ids,
            "document_node_id": document,
            "chunk_node_ids": chunk_node_ids,
            "chunk_count": len(chunks),
        }

    def search_text(
        self, query_text: str, k: int = 5, *, embed: EmbedFn | None = None
    ) -> SearchResponse:
        """``mem.search_text``: embed the query, then :meth:`search_vector`."""
        return self.search_vector(self._embed_fn(embed)(query_text), k)

    # -- metadata, snapshot, proof, health ------------------------------------

    def set_metadata(self, target_id: str, metadata: Any) -> None:
        """Replace the metadata of ``rec:N`` / ``node:N`` (None clears); raises NotFound."""
        self._post_json("/v1/memory/meta/set", {"target_id": target_id, "metadata": metadata})

    def get_metadata(self, target_id: str) -> Any:
        """The metadata of ``rec:N`` / ``node:N``; None when unset or unknown."""
        body = self._json(
            self._request("GET", "/v1/memory/meta/get", params={"target_id": target_id})
        )
        return body.get("metadata")

    def snapshot(self) -> bytes:
        """The server's snapshot bytes."""
        return self._request("GET", "/v1/snapshot/download").content

    def snapshot_to(self, file: IO[bytes]) -> int:
        """Write the server's snapshot into the binary ``file`` as it arrives; returns its size."""
        try:
            with self._http.stream("GET", "/v1/snapshot/download") as response:
                if not response.is_success:
                    response.read()
                    self._check(response)
                size = 0
                for chunk in response.iter_bytes(_STREAM_CHUNK):
                    file.write(chunk)
                    size += len(chunk)
        except httpx.TransportError as exc:
            raise Unavailable(f"VMP server unreachable ({type(exc).__name__})") from exc
        return size

    def restore(self, snapshot: bytes | IO[bytes]) -> None:
        """Replace the server's state by ``snapshot``: bytes, or a binary file streamed
        from its current position to its end (never read whole into memory).

        Raises InvalidArgument for a bad snapshot, PayloadTooLarge (413) for one
        above the server's cap, CapacityExceeded for more records than it holds.
        """
        headers = {"Content-Type": "application/octet-stream"}
        content: bytes | Iterator[bytes]
        if isinstance(snapshot, bytes | bytearray | memoryview):
            content = bytes(snapshot)
        else:
            if snapshot.seekable():
                # A declared length lets the server refuse an oversized upload unsent.
                here = snapshot.tell()
                headers["Content-Length"] = str(snapshot.seek(0, os.SEEK_END) - here)
                snapshot.seek(here)
            content = _chunks(snapshot)
        self._request("POST", "/v1/snapshot/upload", content=content, headers=headers)

    def state_hash(self) -> str:
        """The server's ``final_state_hash`` (64 hex digits)."""
        return str(self._json(self._request("GET", "/v1/proof/state"))["final_state_hash"])

    def health(self) -> HealthResponse:
        """``GET /health``: status, dim and record count."""
        return cast(HealthResponse, self._json(self._request("GET", "/health")))

    # -- plumbing ---------------------------------------------------------------

    def _embed_fn(self, embed: EmbedFn | None) -> EmbedFn:
        chosen = embed or self._embed
        if chosen is None:
            raise ValueError("an embed function is required for text operations")
        return chosen

    def _post_json(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            content = json.dumps(payload, allow_nan=False, separators=(",", ":"))
        except ValueError as exc:
            raise InvalidArgument("request values must be finite numbers") from exc
        except TypeError as exc:
            raise InvalidArgument("request values must be JSON data") from exc
        response = self._request(
            "POST", path, content=content, headers={"Content-Type": "application/json"}
        )
        return self._json(response)

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise Unavailable(f"VMP server unreachable ({type(exc).__name__})") from exc
        self._check(response)
        return response

    @staticmethod
    def _check(response: httpx.Response) -> None:
        if response.status_code == 401:
            raise Unauthenticated("missing or wrong API key")
        if not response.is_success:
            raise _error_of(response)

    @staticmethod
    def _json(response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError as exc:
            raise VmpError("INTERNAL_ERROR", response.status_code, "response is not JSON") from exc
        if not isinstance(body, dict):
            raise VmpError("INTERNAL_ERROR", response.status_code, "response is not a JSON object")
        return body


def _error_of(response: httpx.Response) -> VmpError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        return error_from_wire(body["code"], response.status_code, str(body.get("error", "")))
    if response.status_code == 404:
        return WrongBaseURL(response.request.url.path)
    return VmpError(
        "INTERNAL_ERROR", response.status_code, f"unexpected HTTP {response.status_code}"
    )


def _chunks(file: IO[bytes]) -> Iterator[bytes]:
    while chunk := file.read(_STREAM_CHUNK):
        yield chunk


def _numbers(values: Iterable[float]) -> list[float]:
    """A vector as plain JSON numbers (embedders often return numpy arrays)."""
    out: list[float] = []
    for value in values:
        if isinstance(value, bool):
            raise InvalidArgument("vector values must be numbers")
        number = float(value)
        if not math.isfinite(number):
            raise InvalidArgument("vector values must be finite")
        out.append(number)
    return out
