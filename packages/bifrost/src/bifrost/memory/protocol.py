"""The memory store protocol (the seed's FN blocks). Stores are synchronous; the
app runs them in a worker thread. Reads are grant-agnostic: the library applies
the token's scope grant before and after each call. Writes take the grant in
``ctx`` and decide it in their transaction (:class:`MemoryWrites`, through
:mod:`bifrost.writes`); so does ``delete_many`` (``grant=``, :class:`MemoryReads`)."""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Protocol, TypedDict, Unpack, runtime_checkable

from bifrost.fields import validate_fields
from bifrost.memory.capabilities import StoreCapabilities
from bifrost.memory.options import MemoryOptions, memory_limits
from bifrost.memory.retention import validate_retention
from bifrost.memory.validation import (
    DEFAULT_MAX_PAGE,
    ScanQuery,
    SearchQuery,
    ValidatedChunk,
    validate_id,
    validate_scan,
    validate_search,
    validate_upsert,
)
from bifrost.quota import NO_QUOTA, Quota
from bifrost.records import distinct_ids
from bifrost.store_base import BatchWrites, PageArgs, ScopeArgs, WriteArgs, keywords
from bifrost.writes import WriteRequest

__all__ = [
    "MemoryDataStore",
    "MemoryOptions",
    "MemoryReads",
    "MemoryScan",
    "MemoryWrites",
    "ScanArgs",
    "ScopeLookup",
    "SearchArgs",
    "SearchLimits",
    "Selection",
    "memory_health",
]


class Selection(ScopeArgs, total=False):
    """Which records a memory read covers and what it returns of each: the scope
    filter, ``metadata_filter`` (only on the fields the store declares) and
    ``include`` (``{"embedding": bool}``)."""

    metadata_filter: dict[str, Any] | None
    include: dict[str, Any] | None


class SearchArgs(Selection, total=False):
    """``search``'s keywords beyond ``top_k``; ``fidelity_target`` is accepted and
    ignored (search is always exact)."""

    fidelity_target: Any


class SearchLimits(TypedDict):
    """The limits of the store a search is validated with: the keywords
    :func:`~bifrost.memory.validation.validate_search` takes after the call's own."""

    embedding_dim: int
    max_top_k: int
    max_scope_any: int
    filterable: Sequence[str]


class ScanArgs(Selection, PageArgs, total=False):
    """``scan``'s keywords: the selection, the page size and ``after_id``, the id
    the page starts after."""

    after_id: str | None


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
        self, records: list[dict[str, Any]], **args: Unpack[WriteArgs]
    ) -> dict[str, Any]:
        """``{"upserted": N, "replayed": bool}``; raises InvalidArguments,
        IdempotencyConflict, RevisionMismatch (nothing written on any error)."""
        ...

    def search(
        self, vector: list[float], *, top_k: int, **args: Unpack[SearchArgs]
    ) -> list[dict[str, Any]]:
        """Rows ``{chunk, chunk_id, score, recalled_view, revision}``; raises
        InvalidArguments, InvalidFilter."""
        ...

    def get(self, chunk_id: str) -> dict[str, Any] | None: ...

    def get_many(self, ids: list[str]) -> list[dict[str, Any]]: ...

    def delete_many(self, ids: list[str]) -> dict[str, Any]:
        """``{"deleted": N}``. A store built on :class:`MemoryReads` also takes
        ``grant=`` and decides it inside the delete's transaction; dispatch guards any
        other store by reading the scopes first (a window a concurrent writer under
        another grant can use)."""
        ...


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


@runtime_checkable
class MemoryScan(Protocol):
    """A store that implements ``scan`` (memory-plane.md "Beyond v1"): the handshake
    advertises the verb only for such a store; any other answers UnsupportedVerb."""

    def scan(self, **args: Unpack[ScanArgs]) -> dict[str, Any]:
        """``{"items": [record + revision, …], "next_after_id": str | None}``; raises
        InvalidArguments, InvalidFilter."""
        ...


def memory_health(
    *, embedding_dim: int, max_batch: int, max_top_k: int, max_page: int = DEFAULT_MAX_PAGE
) -> dict[str, Any]:
    """What ``health`` returns for a store with these settings: static facts, never
    counts of data (every memory store answers with this dict)."""
    return {
        "status": "ok",
        "plane": "memory",
        "embedding_dim": embedding_dim,
        "distance": "cosine",
        "max_batch": max_batch,
        "max_top_k": max_top_k,
        "max_page": max_page,
    }


class MemoryWrites(BatchWrites, abc.ABC):
    """``upsert_many`` for a store class, once: the protocol's signature and the
    validation into a :class:`~bifrost.writes.WriteRequest` (with the store's
    ``embedding_dim`` and ``max_batch``), then the store's :meth:`perform_upsert`,
    which holds only what happens inside its transaction (see :mod:`bifrost.writes`).
    """

    embedding_dim: int
    max_batch: int

    def upsert_many(
        self, records: list[dict[str, Any]], **args: Unpack[WriteArgs]
    ) -> dict[str, Any]:
        """Store each chunk as the next revision of its id, atomically and idempotently:
        ``{"upserted": N, "replayed": bool}``.

        Raises InvalidArguments (the whole batch is validated first), Forbidden (a
        record outside ``ctx.scope``, or one replacing a stored record outside it,
        decided inside the transaction), IdempotencyConflict, RevisionMismatch (the
        first failing id of ``expected_revisions``, in its order); on any error
        nothing is written.
        """
        validate = partial(
            validate_upsert, embedding_dim=self.embedding_dim, max_batch=self.max_batch
        )
        return self.write_batch("upsert_many", validate, self.perform_upsert, records, args)

    @abc.abstractmethod
    def perform_upsert(self, request: WriteRequest[ValidatedChunk], actor: str) -> dict[str, Any]:
        """The validated write of ``actor``, inside the store's transaction."""


class MemoryReads(abc.ABC):
    """``describe_store``, ``search``, ``get``, ``get_many``, ``scopes_of`` and
    ``delete_many`` for a store class, once: the protocol's signatures and the
    validation (with the store's ``embedding_dim``, ``max_batch``, ``max_top_k`` and
    ``max_scope_any``), then one ``perform_*`` of the store that receives only
    validated arguments: a :class:`~bifrost.memory.validation.SearchQuery`, or
    distinct ids in the order asked.
    """

    embedding_dim: int
    max_batch: int
    max_top_k: int
    max_scope_any: int
    max_page: int = DEFAULT_MAX_PAGE
    filterable_fields: tuple[str, ...] = ()
    """The declared filterable fields (:mod:`bifrost.memory.filters`); none: v1."""
    quota: Quota
    retention_s: float | None
    _clock: Callable[[], float]

    def take_options(self, embedding_dim: int, options: MemoryOptions) -> None:
        """Check ``embedding_dim`` and ``options`` (each absent one its default) and
        keep them as the store's attributes, before the store makes anything.

        Raises TypeError for a keyword :class:`MemoryOptions` does not name;
        InvalidLimits naming the first bad limit
        (:func:`~bifrost.memory.options.memory_limits`); ValueError for a bad
        ``retention_s`` or ``filterable_fields``."""
        limits = memory_limits(embedding_dim, options)
        self.max_batch, self.max_top_k, self.max_scope_any, self.max_page = limits
        self.embedding_dim = embedding_dim
        self.retention_s = validate_retention(options.get("retention_s"))
        self.filterable_fields = validate_fields(options.get("filterable_fields", ()))
        self._clock = options.get("clock", time.time)
        self.quota = options.get("quota", NO_QUOTA)

    def health(self) -> dict[str, Any]:
        """The store's static facts (:func:`memory_health`), never counts of data. A
        backend with a database first makes a round trip to it, then returns these."""
        return memory_health(
            embedding_dim=self.embedding_dim,
            max_batch=self.max_batch,
            max_top_k=self.max_top_k,
            max_page=self.max_page,
        )

    def describe_store(self) -> dict[str, Any]:
        """Exactly the v1 capability dict (INV-006), listing the filterable fields."""
        return StoreCapabilities(filterable_metadata_fields=list(self.filterable_fields)).to_dict()

    def search(
        self, vector: list[float], *, top_k: int, **args: Unpack[SearchArgs]
    ) -> list[dict[str, Any]]:
        """The exact ``top_k`` in-scope chunks by cosine, best first, ties by chunk_id:
        rows ``{chunk, chunk_id, score, recalled_view, revision}``.

        Raises InvalidArguments / InvalidFilter. ``fidelity_target`` is ignored:
        search is always exact.
        """
        given = keywords("search", args, SearchArgs)
        del given["fidelity_target"]
        return self.perform_search(validate_search(vector, top_k, **given, **self.search_limits))

    @property
    def search_limits(self) -> SearchLimits:
        """The store's limits :meth:`search` validates with."""
        return {
            "embedding_dim": self.embedding_dim,
            "max_top_k": self.max_top_k,
            "max_scope_any": self.max_scope_any,
            "filterable": self.filterable_fields,
        }

    def scan(self, **args: Unpack[ScanArgs]) -> dict[str, Any]:
        """One keyset page of the records in scope (and filter), ascending ``chunk_id``
        (code-point order) after ``after_id``: ``{"items": [record + revision, …],
        "next_after_id"}``, the last item's id when more follow, else None.

        Raises InvalidArguments / InvalidFilter.
        """
        query = validate_scan(
            **keywords("scan", args, ScanArgs),
            max_page=self.max_page,
            max_scope_any=self.max_scope_any,
            filterable=self.filterable_fields,
        )
        found = self.perform_scan(query)
        page = found[: query.limit]
        more = len(found) > query.limit
        return {"items": [r for _, r in page], "next_after_id": page[-1][0] if more else None}

    def get(self, chunk_id: str) -> dict[str, Any] | None:
        """The record as written plus ``revision``, or None. Raises InvalidArguments."""
        found = self.perform_get([validate_id(chunk_id, "chunk_id")])
        return found[0] if found else None

    def get_many(self, ids: list[str]) -> list[dict[str, Any]]:
        """Found records in the order asked, duplicates once. Raises InvalidArguments."""
        return self.perform_get(distinct_ids(ids, max_batch=self.max_batch))

    def scopes_of(self, ids: list[str]) -> dict[str, dict[str, str]]:
        """``{id: scope}`` of the ids that exist (:class:`ScopeLookup`), ``ids``
        validated exactly as ``get_many`` validates them. Raises InvalidArguments."""
        return self.perform_scopes_of(distinct_ids(ids, max_batch=self.max_batch))

    def delete_many(
        self, ids: list[str], *, grant: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """Delete the chunks of ``ids`` that lie inside ``grant`` (None or ``{}``:
        every one), decided inside the delete's transaction
        (:func:`bifrost.writes.deletable`): ``{"deleted": N}``, N the distinct ids that
        existed inside the grant; one outside it is neither deleted nor counted.
        Raises InvalidArguments."""
        wanted = distinct_ids(ids, max_batch=self.max_batch)
        return {"deleted": self.perform_delete(wanted, dict(grant or {}))}

    @abc.abstractmethod
    def perform_search(self, query: SearchQuery) -> list[dict[str, Any]]:
        """The rows of a validated search (see :meth:`search`)."""

    @abc.abstractmethod
    def perform_scan(self, query: ScanQuery) -> list[tuple[str, dict[str, Any]]]:
        """Up to ``query.limit + 1`` ``(chunk_id, record)`` pairs passing ``query``
        (scope, filter, ids above ``after_id``) in ascending id order, each record plus
        its ``revision`` and without its embedding field unless
        ``query.include_embedding`` (:func:`~bifrost.memory.validation.scan_item`);
        all read in one snapshot."""

    @abc.abstractmethod
    def perform_get(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """The records of the distinct ``ids`` that exist, each plus its ``revision``,
        in the order of ``ids``."""

    @abc.abstractmethod
    def perform_scopes_of(self, ids: Sequence[str]) -> dict[str, dict[str, str]]:
        """``{id: scope}`` of the distinct ``ids`` that exist (each a fresh dict)."""

    @abc.abstractmethod
    def perform_delete(self, ids: Sequence[str], grant: Mapping[str, str]) -> int:
        """Delete the chunks of the distinct ``ids`` that :func:`bifrost.writes.deletable`
        keeps under ``grant``, given the stored scopes read in the delete's own
        transaction (rows locked: no writer can move or create one of them between
        the decision and the delete); how many of those existed."""
