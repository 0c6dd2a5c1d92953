"""``RatatoskrVectorStore``: a LangChain ``VectorStore`` over ratatoskr's memory plane.

One store is one scope (a dict of lattice axes, e.g. ``{"tenant": "acme", "end_user":
"ada"}``): every record it writes carries that scope, every token it mints carries it
as the grant, so reads see only records inside it. Over HTTP each call mints its own
token from the Heimdall key (bifrost's :class:`~bifrost.client.BifrostClient`); the
``async`` methods are native, over :class:`~bifrost.client.AsyncBifrostClient`: each
operation is written once, as a plan both forms run (:mod:`langchain_ratatoskr.plans`).
:meth:`RatatoskrVectorStore.local` opens a memory file in-process instead (no server).

Scores are the plane's cosine similarity, higher is closer (1.0 identical, -1.0
opposite); relevance scores map it onto [0, 1] as ``(1 + cosine) / 2``. Record layout:
:mod:`langchain_ratatoskr.records`; ids: :mod:`langchain_ratatoskr.ids`; filters:
:mod:`langchain_ratatoskr.filters`. Errors from the plane are bifrost's typed
``BifrostError`` subclasses (``InvalidArguments``, ``InvalidFilter``, ``Forbidden``, …).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore
from langchain_core.vectorstores.utils import maximal_marginal_relevance

from bifrost.context import DEFAULT_CONSUMER_ID
from bifrost.scope import validate_record_scope
from langchain_ratatoskr.calls import HttpCalls, LocalCalls, MemoryCalls
from langchain_ratatoskr.filters import metadata_filter
from langchain_ratatoskr.ids import IdNamespace
from langchain_ratatoskr.limits import EmbeddingDimensionMismatch, check_dim, parts, unique
from langchain_ratatoskr.plans import Call, Embed, Plan, arun, run
from langchain_ratatoskr.records import chunk_ids, to_document, to_records

__all__ = ["EmbeddingDimensionMismatch", "RatatoskrVectorStore"]

Scored = list[tuple[Document, float]]
T = TypeVar("T")


class RatatoskrVectorStore(VectorStore):
    """LangChain ``VectorStore`` on ratatoskr's memory plane.

    ``RatatoskrVectorStore(embedding=…, url="http://host:8765/memory", key=<Heimdall
    key>, scope={"tenant": "acme"}, actor="langchain")``. ``issuer``, ``audience``
    and ``timeout`` are bifrost's client options; ``calls`` replaces the HTTP clients
    with another way to the plane (:mod:`langchain_ratatoskr.calls`: what
    :meth:`local` passes). Raises ``InvalidArguments`` for a scope outside the
    lattice, TypeError without ``url`` and ``key`` (and no ``calls``).
    """

    def __init__(
        self,
        embedding: Embeddings,
        *,
        url: str | None = None,
        key: bytes | str | None = None,
        scope: Mapping[str, str] | None = None,
        actor: str = "langchain",
        issuer: str = "heimdall",
        audience: str = DEFAULT_CONSUMER_ID,
        timeout: float = 30.0,
        calls: MemoryCalls | None = None,
    ) -> None:
        self.embedding = embedding
        self.scope = validate_record_scope(dict(scope or {}), "scope")
        self.actor = actor
        self._ids = IdNamespace(self.scope)
        self._health: dict[str, Any] | None = None
        if calls is None:
            if url is None or key is None:
                raise TypeError(
                    "RatatoskrVectorStore needs url= and key= (the memory plane's base URL "
                    "and the Heimdall key), or use RatatoskrVectorStore.local(path, …)"
                )
            raw = key.encode("utf-8") if isinstance(key, str) else key
            calls = HttpCalls(
                url,
                raw,
                actor=actor,
                scope=self.scope,
                issuer=issuer,
                audience=audience,
                timeout=timeout,
            )
        self._calls = calls

    @classmethod
    def local(
        cls,
        path: str | Path,
        embedding: Embeddings,
        *,
        scope: Mapping[str, str] | None = None,
        actor: str = "langchain",
        embedding_dim: int | None = None,
        filterable_fields: Sequence[str] = (),
    ) -> Self:
        """A store on the memory file at ``path`` (created on first use), in this process.
        ``embedding_dim`` defaults to the length of ``embedding``'s vectors (one probe
        query); ``filterable_fields`` are the fields filters may name, as the server's
        ``RATATOSKR_MEMORY_FILTERABLE_FIELDS`` (``metadata.<key>``). Needs the
        ``local`` extra (``ratatoskr-memory``). Raises ``SchemaMismatch`` for a file of
        another dimension."""
        try:
            from ratatoskr.memory import open_memory_store  # noqa: PLC0415 - an extra
        except ImportError as exc:  # pragma: no cover - the workspace installs it
            raise ImportError(
                "RatatoskrVectorStore.local needs ratatoskr-memory: "
                "pip install 'langchain-ratatoskr[local]'"
            ) from exc
        dim = embedding_dim or len(embedding.embed_query("dimension probe"))
        store = open_memory_store(
            str(path), embedding_dim=dim, filterable_fields=tuple(filterable_fields)
        )
        granted = validate_record_scope(dict(scope or {}), "scope")
        calls = LocalCalls(store, actor=actor, scope=granted, owned=True)
        return cls(embedding, scope=granted, actor=actor, calls=calls)

    @property
    def embeddings(self) -> Embeddings:
        return self.embedding

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        return _cosine_to_relevance

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Close the HTTP connections (or the local memory file)."""
        self._calls.close()

    async def aclose(self) -> None:
        await self._calls.aclose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- writes -----------------------------------------------------------------------------

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Embed and upsert ``texts`` (an existing id is replaced); returns their ids."""
        return self._run(self._add(texts, metadatas, ids, kwargs, "add_texts"))

    async def aadd_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        return await self._arun(self._add(texts, metadatas, ids, kwargs, "aadd_texts"))

    def _add(
        self,
        texts: Iterable[str],
        metadatas: Sequence[Mapping[str, Any]] | None,
        ids: list[str] | None,
        kwargs: Mapping[str, Any],
        verb: str,
    ) -> Plan[list[str]]:
        """Embed, then upsert in batches the plane takes (``max_batch``); raises
        EmbeddingDimensionMismatch before anything is sent."""
        _no_options(kwargs, verb)
        texts = list(texts)
        ids_out = chunk_ids(self._ids, texts, metadatas, ids)
        if not texts:
            return []
        vectors = yield Embed(texts)
        limits = yield from self._limits()
        for vector in vectors:
            check_dim(len(vector), limits)
        for records in parts(to_records(self.scope, ids_out, texts, vectors, metadatas), limits):
            yield Call("upsert_many", {"records": records})
        return [self._ids.doc_id(c) for c in ids_out]

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        """Delete ``ids`` (absent ones are ignored); ``None``: every record this store
        wrote under its scope (records other clients wrote there stay)."""
        return self._run(self._delete(ids, kwargs, "delete"))

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        return await self._arun(self._delete(ids, kwargs, "adelete"))

    def _delete(self, ids: list[str] | None, kwargs: Mapping[str, Any], verb: str) -> Plan[bool]:
        _no_options(kwargs, verb)
        limits = yield from self._limits()
        if ids is None:
            after: str | None = None
            while True:
                page = yield Call("scan", self._scan_args(after, limits))
                yield from self._delete_chunks([str(r["id"]) for r in page["items"]], limits)
                if (after := page["next_after_id"]) is None:
                    return True
        yield from self._delete_chunks([self._ids.chunk_id(i) for i in ids], limits)
        return True

    def _delete_chunks(self, chunk_ids: list[str], limits: Mapping[str, Any]) -> Plan[None]:
        for part in parts([c for c in chunk_ids if self._ids.owns(c)], limits):
            yield Call("delete_many", {"ids": part})

    def _scan_args(self, after: str | None, limits: Mapping[str, Any]) -> dict[str, Any]:
        args: dict[str, Any] = {
            "limit": int(limits.get("max_page") or 100),
            "include": {"embedding": False},
        }
        if after is not None:
            args["after_id"] = after
        return args

    # -- reads ------------------------------------------------------------------------------

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The documents of ``ids`` that exist, in the order asked (each once)."""
        return self._run(self._get(ids))

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        return await self._arun(self._get(ids))

    def _get(self, ids: Sequence[str]) -> Plan[list[Document]]:
        limits = yield from self._limits()
        found: list[Document] = []
        for part in parts(unique(self._ids.chunk_id(i) for i in ids), limits):
            rows = yield Call("get_many", {"ids": part})
            found += [to_document(self._ids, r) for r in rows]
        return found

    def similarity_search(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Document]:
        """The ``k`` documents closest to ``query`` (exact), passing ``filter``."""
        return [doc for doc, _ in self.similarity_search_with_score(query, k, filter, **kwargs)]

    async def asimilarity_search(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Document]:
        scored = await self.asimilarity_search_with_score(query, k, filter, **kwargs)
        return [doc for doc, _ in scored]

    def similarity_search_with_score(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> Scored:
        """``(document, cosine similarity)`` pairs, closest first (higher is closer)."""
        vector = self.embedding.embed_query(query)
        return self.similarity_search_with_score_by_vector(vector, k, filter, **kwargs)

    async def asimilarity_search_with_score(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> Scored:
        vector = await self.embedding.aembed_query(query)
        return await self.asimilarity_search_with_score_by_vector(vector, k, filter, **kwargs)

    def similarity_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        scored = self.similarity_search_with_score_by_vector(embedding, k, filter, **kwargs)
        return [doc for doc, _ in scored]

    async def asimilarity_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        scored = await self.asimilarity_search_with_score_by_vector(embedding, k, filter, **kwargs)
        return [doc for doc, _ in scored]

    def similarity_search_with_score_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Scored:
        """``(document, cosine similarity)`` pairs closest to ``embedding``."""
        return self._run(self._search(embedding, k, filter, kwargs))

    async def asimilarity_search_with_score_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Scored:
        return await self._arun(self._search(embedding, k, filter, kwargs))

    def _search(
        self,
        vector: Sequence[float],
        k: int,
        filter: Mapping[str, Any] | None,
        kwargs: Mapping[str, Any],
    ) -> Plan[Scored]:
        limits = yield from self._limits()
        rows = yield Call("search", self._search_args(vector, k, filter, kwargs, limits, False))
        return [(to_document(self._ids, row["chunk"]), float(row["score"])) for row in rows]

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """``k`` documents chosen by maximal marginal relevance among the ``fetch_k``
        closest (``lambda_mult``: 1 = closeness only, 0 = diversity only)."""
        vector = self.embedding.embed_query(query)
        return self.max_marginal_relevance_search_by_vector(
            vector, k, fetch_k, lambda_mult, filter, **kwargs
        )

    async def amax_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        vector = await self.embedding.aembed_query(query)
        return await self.amax_marginal_relevance_search_by_vector(
            vector, k, fetch_k, lambda_mult, filter, **kwargs
        )

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        return self._run(self._mmr(embedding, k, fetch_k, lambda_mult, filter, kwargs))

    async def amax_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        return await self._arun(self._mmr(embedding, k, fetch_k, lambda_mult, filter, kwargs))

    def _search_args(
        self,
        vector: Sequence[float],
        k: int,
        filter: Mapping[str, Any] | None,
        kwargs: Mapping[str, Any],
        limits: Mapping[str, Any],
        vectors: bool,
    ) -> dict[str, Any]:
        _no_options(kwargs, "search")
        check_dim(len(vector), limits)
        args: dict[str, Any] = {
            "vector": [float(x) for x in vector],
            "top_k": k,
            "include": {"embedding": vectors},
        }
        if self.scope:
            args["scope_all"] = dict(self.scope)
        where = metadata_filter(filter)
        if where is not None:
            args["metadata_filter"] = where
        return args

    def _mmr(
        self,
        vector: Sequence[float],
        k: int,
        fetch_k: int,
        lambda_mult: float,
        filter: Mapping[str, Any] | None,
        kwargs: Mapping[str, Any],
    ) -> Plan[list[Document]]:
        limits = yield from self._limits()
        rows = yield Call(
            "search", self._search_args(vector, fetch_k, filter, kwargs, limits, True)
        )
        if not rows:
            return []
        picked = maximal_marginal_relevance(
            np.asarray(vector, dtype=np.float64),
            [row["chunk"]["embedding"] for row in rows],
            lambda_mult=lambda_mult,
            k=k,
        )
        return [to_document(self._ids, rows[i]["chunk"]) for i in picked]

    # -- construction from texts ------------------------------------------------------------

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> Self:
        """A store (``kwargs``: the constructor's) holding ``texts``."""
        store = cls(embedding, **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store

    @classmethod
    async def afrom_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> Self:
        store = cls(embedding, **kwargs)
        await store.aadd_texts(texts, metadatas, ids=ids)
        return store

    # -- the plane's limits -----------------------------------------------------------------

    def _limits(self) -> Plan[dict[str, Any]]:
        """The plane's ``health`` (dimension, batch, top_k and page limits), read once."""
        if self._health is None:
            self._health = dict((yield Call("health", {})))
        return self._health

    def _run(self, plan: Plan[T]) -> T:
        return run(plan, self._calls, self.embedding)

    async def _arun(self, plan: Plan[T]) -> T:
        return await arun(plan, self._calls, self.embedding)


def _cosine_to_relevance(score: float) -> float:
    """Cosine similarity in [-1, 1] as a relevance score in [0, 1]."""
    return (1.0 + score) / 2.0


def _no_options(kwargs: Mapping[str, Any], verb: str) -> None:
    if kwargs:
        raise TypeError(f"{verb}() got unexpected keyword arguments: {', '.join(sorted(kwargs))}")
