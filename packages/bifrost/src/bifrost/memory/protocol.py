"""The memory store protocol (the seed's FN blocks). Stores are synchronous; the
app runs them in a worker thread. Stores are grant-agnostic: the library
applies the token's scope grant before and after each call."""

from __future__ import annotations

import abc
from typing import Any, Protocol, runtime_checkable

from bifrost.context import DispatchContext
from bifrost.memory.validation import ValidatedChunk, validate_upsert
from bifrost.writes import WriteRequest

__all__ = ["MemoryDataStore", "MemoryWrites", "ScopeLookup", "memory_health"]


@runtime_checkable
class MemoryDataStore(Protocol):
    def describe_store(self) -> dict[str, Any]:
        """Exactly ``StoreCapabilities(...).to_dict()``."""
        ...

    def health(self) -> dict[str, Any]:
        """``{"status": "ok", "plane": "memory", "embedding_dim", "distance": "cosine",
        "max_batch", "max_top_k"}``."""
        ...

    def upsert_many(
        self,
        records: list[dict[str, Any]],
        *,
        idempotency_key: str,
        ctx: DispatchContext,
        expected_revisions: dict[str, int] | None = None,
        idempotency_class: str | None = None,
    ) -> dict[str, Any]:
        """``{"upserted": N, "replayed": bool}``; raises InvalidArguments,
        IdempotencyConflict, RevisionMismatch (nothing written on any error)."""
        ...

    def search(
        self,
        vector: list[float],
        *,
        top_k: int,
        scope_all: dict[str, str] | None = None,
        scope_any: list[dict[str, str]] | None = None,
        metadata_filter: dict[str, Any] | None = None,
        include: dict[str, Any] | None = None,
        fidelity_target: Any = None,
    ) -> list[dict[str, Any]]:
        """Rows ``{chunk, chunk_id, score, recalled_view, revision}``; raises
        InvalidArguments, InvalidFilter."""
        ...

    def get(self, chunk_id: str) -> dict[str, Any] | None: ...

    def get_many(self, ids: list[str]) -> list[dict[str, Any]]: ...

    def delete_many(self, ids: list[str]) -> dict[str, Any]: ...


@runtime_checkable
class ScopeLookup(Protocol):
    """Optional: a store that can tell each record's scope without reading the record.

    With it the library decides visibility under a grant *before* fetching bodies,
    so reading ids that exist in another tenant costs what absent ids cost (it would
    otherwise tell a read-only token, by timing, which ids exist elsewhere).
    ``scopes_of`` validates ``ids`` as ``get_many`` does and returns ``{id: scope}``
    for the ids that exist.
    """

    def scopes_of(self, ids: list[str]) -> dict[str, dict[str, str]]: ...


def memory_health(*, embedding_dim: int, max_batch: int, max_top_k: int) -> dict[str, Any]:
    """What ``health`` returns for a store with these settings: static facts, never
    counts of data (every memory store answers with this dict)."""
    return {
        "status": "ok",
        "plane": "memory",
        "embedding_dim": embedding_dim,
        "distance": "cosine",
        "max_batch": max_batch,
        "max_top_k": max_top_k,
    }


class MemoryWrites(abc.ABC):
    """``upsert_many`` for a store class, once: the protocol's signature and the
    validation into a :class:`~bifrost.writes.WriteRequest` (with the store's
    ``embedding_dim`` and ``max_batch``), then the store's :meth:`perform_upsert`,
    which holds only what happens inside its transaction (see :mod:`bifrost.writes`).
    """

    embedding_dim: int
    max_batch: int

    def upsert_many(
        self,
        records: list[dict[str, Any]],
        *,
        idempotency_key: str,
        ctx: DispatchContext,
        expected_revisions: dict[str, int] | None = None,
        idempotency_class: str | None = None,
    ) -> dict[str, Any]:
        """Store each chunk as the next revision of its id, atomically and idempotently:
        ``{"upserted": N, "replayed": bool}``.

        Raises InvalidArguments, IdempotencyConflict, RevisionMismatch (the first
        failing id of ``expected_revisions``, in its order); on any error nothing is
        written.
        """
        request = validate_upsert(
            records,
            expected_revisions,
            idempotency_key,
            idempotency_class,
            embedding_dim=self.embedding_dim,
            max_batch=self.max_batch,
        )
        return self.perform_upsert(request, ctx.actor)

    @abc.abstractmethod
    def perform_upsert(self, request: WriteRequest[ValidatedChunk], actor: str) -> dict[str, Any]:
        """The validated write of ``actor``, inside the store's transaction."""
