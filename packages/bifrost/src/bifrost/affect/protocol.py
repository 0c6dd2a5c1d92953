"""The affect store protocol. Synchronous; reads grant-agnostic, writes and deletes
deciding the grant in their transaction, like memory's."""

from __future__ import annotations

import abc
import copy
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Protocol, Unpack, runtime_checkable

from bifrost.affect.options import AffectOptions, affect_limits
from bifrost.affect.validation import (
    HistoryQuery,
    ListQuery,
    ValidatedAffect,
    validate_history,
    validate_key,
    validate_list,
    validate_put,
)
from bifrost.quota import NO_QUOTA, Quota
from bifrost.records import distinct_ids
from bifrost.store_base import BatchWrites, PageArgs, ScopeArgs, WriteArgs, keywords
from bifrost.writes import WriteRequest

__all__ = [
    "AFFECT_CAPABILITIES",
    "AffectDataStore",
    "AffectOptions",
    "AffectReads",
    "AffectWrites",
    "ListArgs",
    "affect_health",
    "affect_limits",
]

# Module-level because AffectReads's ``list`` verb shadows the builtin inside it.
_Items = list[dict[str, Any]]
_Keys = list[str]

AFFECT_CAPABILITIES: dict[str, Any] = {
    "history_supported": True,
    "optimistic_locking_supported": True,
    "transaction_supported": False,
    "filterable_metadata_fields": [],
}


class ListArgs(ScopeArgs, PageArgs, total=False):
    """``list``'s keywords: the scope filter, the page size and ``after_key``, the
    key the page starts after."""

    after_key: str | None


@runtime_checkable
class AffectDataStore(Protocol):
    def describe_store(self) -> dict[str, Any]:
        """Exactly :data:`AFFECT_CAPABILITIES`."""
        ...

    def health(self) -> dict[str, Any]:
        """``{"status": "ok", "plane": "affect", "max_batch", "max_page"}``."""
        ...

    def put_many(self, records: _Items, **args: Unpack[WriteArgs]) -> dict[str, Any]:
        """``{"written": N, "replayed": bool}``."""
        ...

    def get(self, key: str) -> dict[str, Any] | None: ...

    def get_many(self, keys: list[str]) -> list[dict[str, Any]]: ...

    def history(
        self, key: str, *, limit: int | None = None, before_revision: int | None = None
    ) -> dict[str, Any]:
        """``{"items": [newest first], "next_before_revision": int | None}``."""
        ...

    def delete_many(self, keys: list[str]) -> dict[str, Any]:
        """``{"deleted": N}``; a store built on :class:`AffectReads` also takes
        ``grant=`` (see ``bifrost.memory.protocol.MemoryDataStore.delete_many``)."""
        ...

    def list(self, **args: Unpack[ListArgs]) -> dict[str, Any]:
        """``{"items": [by key ascending], "next_after_key": str | None}``."""
        ...


def affect_health(*, max_batch: int, max_page: int) -> dict[str, Any]:
    """What ``health`` returns for a store with these settings: static facts, never
    counts of data (every affect store answers with this dict)."""
    return {"status": "ok", "plane": "affect", "max_batch": max_batch, "max_page": max_page}


class AffectWrites(BatchWrites, abc.ABC):
    """``put_many`` for a store class, once: the protocol's signature and the
    validation into a :class:`~bifrost.writes.WriteRequest` (with the store's
    ``max_batch``), then the store's :meth:`perform_put`, which holds only what
    happens inside its transaction (see :mod:`bifrost.writes`).
    """

    max_batch: int

    def put_many(self, records: _Items, **args: Unpack[WriteArgs]) -> dict[str, Any]:
        """Append the next revision of every record's key, atomically and idempotently:
        ``{"written": N, "replayed": bool}``.

        Raises InvalidArguments (the whole batch is validated first), Forbidden (a
        record outside ``ctx.scope``, or one replacing a stored record outside it,
        decided inside the transaction), IdempotencyConflict (same actor and key,
        other payload), RevisionMismatch (the first failing key of ``expected_revisions``,
        in its order); on any error nothing is written.
        """
        validate = partial(validate_put, max_batch=self.max_batch)
        return self.write_batch("put_many", validate, self.perform_put, records, args)

    @abc.abstractmethod
    def perform_put(self, request: WriteRequest[ValidatedAffect], actor: str) -> dict[str, Any]:
        """The validated write of ``actor``, inside the store's transaction."""


class AffectReads(abc.ABC):
    """``describe_store``, ``get``, ``get_many``, ``history``, ``list`` and
    ``delete_many`` for a store class, once: the protocol's signatures and the
    validation (with the store's ``max_batch``, ``max_page`` and ``max_scope_any``),
    then one ``perform_*`` of the store that receives only validated arguments: a
    :class:`~bifrost.affect.validation.HistoryQuery` or
    :class:`~bifrost.affect.validation.ListQuery`, or distinct keys in the order asked.
    """

    max_batch: int
    max_page: int
    max_scope_any: int
    quota: Quota
    _clock: Callable[[], float]

    def take_options(self, options: AffectOptions) -> None:
        """Check ``options`` (:func:`affect_limits`) and keep them as the store's
        attributes, before the store makes anything. Raises TypeError, InvalidLimits."""
        self.max_batch, self.max_page, self.max_scope_any = affect_limits(options)
        self._clock = options.get("clock", time.time)
        self.quota = options.get("quota", NO_QUOTA)

    def health(self) -> dict[str, Any]:
        """The store's static facts (:func:`affect_health`), never counts of data. A
        backend with a database first makes a round trip to it, then returns these."""
        return affect_health(max_batch=self.max_batch, max_page=self.max_page)

    def describe_store(self) -> dict[str, Any]:
        """Exactly :data:`AFFECT_CAPABILITIES` (a fresh copy)."""
        return copy.deepcopy(AFFECT_CAPABILITIES)

    def get(self, key: str) -> dict[str, Any] | None:
        """The current record plus ``revision`` and ``recorded_at``, or None.

        Raises InvalidArguments.
        """
        found = self.perform_get([validate_key(key)])
        return found[0] if found else None

    def get_many(self, keys: list[str]) -> list[dict[str, Any]]:
        """Found current records in the order asked, duplicates once. Raises InvalidArguments."""
        return self.perform_get(distinct_ids(keys, max_batch=self.max_batch, what="keys"))

    def history(
        self, key: str, *, limit: int | None = None, before_revision: int | None = None
    ) -> dict[str, Any]:
        """Revisions of ``key`` newest first, keyset-paged by ``before_revision``:
        ``{"items", "next_before_revision"}``, the cursor the oldest revision of the page
        when older ones exist. New revisions are always higher, so concurrent writes
        never shift a page. Raises InvalidArguments.
        """
        return self.perform_history(
            validate_history(key, limit, before_revision, max_page=self.max_page)
        )

    def list(self, **args: Unpack[ListArgs]) -> dict[str, Any]:
        """Current records in scope by key ascending, keyset-paged by ``after_key``:
        ``{"items", "next_after_key"}``. Raises InvalidArguments, InvalidFilter.
        """
        return self.perform_list(
            validate_list(
                **keywords("list", args, ListArgs),
                max_page=self.max_page,
                max_scope_any=self.max_scope_any,
            )
        )

    def delete_many(self, keys: _Keys, *, grant: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Erase the current state and all history of each key whose current record
        lies inside ``grant`` (None or ``{}``: every one), decided inside the delete's
        transaction (:func:`bifrost.writes.deletable`): ``{"deleted": N}``, N the
        distinct keys that existed inside the grant; one outside it is neither erased
        nor counted. Raises InvalidArguments."""
        wanted = distinct_ids(keys, max_batch=self.max_batch, what="keys")
        return {"deleted": self.perform_delete(wanted, dict(grant or {}))}

    @abc.abstractmethod
    def perform_get(self, keys: Sequence[str]) -> _Items:
        """The current records of the distinct ``keys`` that exist, each plus its
        ``revision`` and ``recorded_at``, in the order of ``keys``."""

    @abc.abstractmethod
    def perform_history(self, query: HistoryQuery) -> dict[str, Any]:
        """One validated ``history`` page (see :meth:`history`)."""

    @abc.abstractmethod
    def perform_list(self, query: ListQuery) -> dict[str, Any]:
        """One validated ``list`` page (see :meth:`list`)."""

    @abc.abstractmethod
    def perform_delete(self, keys: Sequence[str], grant: Mapping[str, str]) -> int:
        """Erase, with their history, the distinct ``keys`` that
        :func:`bifrost.writes.deletable` keeps under ``grant``, given the current
        records' scopes read in the delete's own transaction (rows locked); how many
        of those existed."""
