"""Where the MCP server's memories live: a local memory-plane file, or a provider.

Both backends answer the memory plane's verbs under a grant, so every tool call is one
call of the wire's own rules: a local file goes through ``dispatch_memory_call`` (the
grant applied exactly as the provider applies a token's), a provider through
``BifrostClient`` (a token minted per call, scoped to the call's grant). Neither
re-implements what the grant lets a call see or change.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from bifrost.client import BifrostClient
from bifrost.context import DispatchContext
from bifrost.envelope import WIRE_VERSION
from bifrost.httpclient import tls_context
from bifrost.memory.dispatch import dispatch_memory_call
from ratatoskr.embed import Embedder, check_dimension
from ratatoskr.memory import SqliteMemoryStore, open_memory_store
from ratatoskr.storage.errors import SchemaMismatch

__all__ = [
    "FORGET_PAGE",
    "GrantedCalls",
    "LocalBackend",
    "MemoryBackend",
    "RemoteBackend",
    "open_local",
]

# Records a provider-side forget_all reads and deletes per round trip (the wire's default
# scan page, within every server's max_page and max_batch).
FORGET_PAGE = 100


class GrantedCalls(Protocol):
    """The memory plane as one grant sees it (bifrost's ``BifrostClient`` is one)."""

    def call(self, verb: str, args: dict[str, Any], *, idempotency_key: str | None = None) -> Any:
        """One verb's result; raises the verb's typed ``BifrostError`` (or a
        ``StorageError`` from a local file)."""
        ...


class MemoryBackend(Protocol):
    """The memory plane, called under a grant (``{}`` would be unrestricted: the tools
    never pass it, every call carries at least the tenant)."""

    @property
    def embedding_dim(self) -> int:
        """The dimension of the store's embeddings."""
        ...

    def granted(self, grant: dict[str, str]) -> GrantedCalls:
        """The plane under ``grant``: what its calls may see and change."""
        ...

    def forget(self, scope: dict[str, str]) -> int:
        """Erase every record whose scope holds ``scope``'s axes; how many."""
        ...

    def close(self) -> None: ...


class LocalBackend:
    """A memory-plane file opened in this process (SQLite, safe beside other processes
    on the same file: another ``ratatoskr mcp``, a provider)."""

    def __init__(self, store: SqliteMemoryStore, *, actor: str) -> None:
        self._store = store
        self._actor = actor

    @property
    def embedding_dim(self) -> int:
        return self._store.embedding_dim

    def granted(self, grant: dict[str, str]) -> _LocalCalls:
        return _LocalCalls(self._store, self._actor, grant)

    def forget(self, scope: dict[str, str]) -> int:
        """The store's own erasure: batched, and no byte of what it erased left in the
        file, its WAL or its sidecar when it returns."""
        return self._store.forget(scope)

    def close(self) -> None:
        self._store.close()


@dataclass(frozen=True)
class _LocalCalls:
    """Each call dispatched on the store as the provider dispatches a token's: by
    ``actor``, under ``grant``."""

    store: SqliteMemoryStore
    actor: str
    grant: dict[str, str]

    def call(self, verb: str, args: dict[str, Any], *, idempotency_key: str | None = None) -> Any:
        envelope: dict[str, Any] = {
            "wire_version": WIRE_VERSION,
            "call_id": str(uuid.uuid4()),
            "verb": verb,
            "args": args,
        }
        if idempotency_key is not None:
            envelope["idempotency_key"] = idempotency_key
        ctx = DispatchContext(actor=self.actor, scope=dict(self.grant), verb=verb)
        return dispatch_memory_call(self.store, envelope, ctx)


class RemoteBackend:
    """A provider's memory plane over HTTP: ``base_url`` ends in ``/memory`` on a combined
    provider; every call carries a token minted from ``key`` for exactly its grant."""

    def __init__(
        self,
        base_url: str,
        key: bytes,
        *,
        actor: str,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._base_url = base_url
        self._key = key
        self._actor = actor
        # One connection pool for every call; a client object per grant carries it.
        self._http = httpx.Client(
            base_url=base_url, transport=transport, timeout=timeout, verify=tls_context()
        )
        self._dim: int | None = None

    def granted(self, grant: dict[str, str]) -> BifrostClient:
        return BifrostClient(
            self._base_url,
            self._key,
            actor=self._actor,
            scope=grant,
            plane="memory",
            http_client=self._http,
        )

    @property
    def embedding_dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.granted({}).health()["embedding_dim"])
        return self._dim

    def forget(self, scope: dict[str, str]) -> int:
        """Scan and delete page by page under ``scope`` as the grant: the provider never
        shows or deletes a record outside it."""
        client = self.granted(scope)
        erased = 0
        after: str | None = None
        while True:
            page = client.scan(limit=FORGET_PAGE, after_id=after, include={"embedding": False})
            ids = [str(item["id"]) for item in page["items"]]
            if ids:
                erased += int(client.delete_many(ids)["deleted"])
            after = page.get("next_after_id")
            if after is None:
                return erased

    def close(self) -> None:
        self._http.close()


def open_local(
    path: str,
    embedder: Embedder,
    *,
    actor: str,
    filterable_fields: Sequence[str] = (),
) -> LocalBackend:
    """Open (creating on first use, at the embedder's dimension) the memory file ``path``.

    Raises ``EmbedderMismatch`` (both dimensions named, the file untouched) when the file
    holds embeddings of another dimension, ``InvalidArguments`` for a bad filterable field
    and ``StorageError`` subclasses for an unusable file.
    """
    try:
        store = open_memory_store(
            path, embedding_dim=embedder.dim, filterable_fields=tuple(filterable_fields)
        )
    except SchemaMismatch as exc:
        if exc.setting != "embedding_dim":
            raise
        check_dimension(int(exc.stored), embedder)
        raise  # not reached: the dimensions differ, so check_dimension raised
    return LocalBackend(store, actor=actor)
