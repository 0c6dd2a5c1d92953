"""The affect store protocol. Synchronous and grant-agnostic, like memory's."""

from __future__ import annotations

import abc
from typing import Any, Protocol, runtime_checkable

from bifrost.affect.validation import ValidatedAffect, validate_put
from bifrost.context import DispatchContext
from bifrost.writes import WriteRequest

__all__ = [
    "AFFECT_CAPABILITIES",
    "AffectDataStore",
    "AffectWrites",
    "affect_health",
    "check_affect_limits",
]

AFFECT_CAPABILITIES: dict[str, Any] = {
    "history_supported": True,
    "optimistic_locking_supported": True,
    "transaction_supported": False,
    "filterable_metadata_fields": [],
}


@runtime_checkable
class AffectDataStore(Protocol):
    def describe_store(self) -> dict[str, Any]:
        """Exactly :data:`AFFECT_CAPABILITIES`."""
        ...

    def health(self) -> dict[str, Any]:
        """``{"status": "ok", "plane": "affect", "max_batch", "max_page"}``."""
        ...

    def put_many(
        self,
        records: list[dict[str, Any]],
        *,
        idempotency_key: str,
        ctx: DispatchContext,
        expected_revisions: dict[str, int] | None = None,
        idempotency_class: str | None = None,
    ) -> dict[str, Any]:
        """``{"written": N, "replayed": bool}``."""
        ...

    def get(self, key: str) -> dict[str, Any] | None: ...

    def get_many(self, keys: list[str]) -> list[dict[str, Any]]: ...

    def history(
        self, key: str, *, limit: int | None = None, before_revision: int | None = None
    ) -> dict[str, Any]:
        """``{"items": [newest first], "next_before_revision": int | None}``."""
        ...

    def delete_many(self, keys: list[str]) -> dict[str, Any]: ...

    def list(
        self,
        *,
        scope_all: dict[str, str] | None = None,
        scope_any: list[dict[str, str]] | None = None,
        limit: int | None = None,
        after_key: str | None = None,
    ) -> dict[str, Any]:
        """``{"items": [by key ascending], "next_after_key": str | None}``."""
        ...


def check_affect_limits(*, max_batch: int, max_page: int, max_scope_any: int) -> None:
    """The limits every affect store is opened with are positive; else ValueError."""
    if max_batch < 1 or max_page < 1 or max_scope_any < 1:
        raise ValueError("max_batch, max_page and max_scope_any must be positive")


def affect_health(*, max_batch: int, max_page: int) -> dict[str, Any]:
    """What ``health`` returns for a store with these settings: static facts, never
    counts of data (every affect store answers with this dict)."""
    return {"status": "ok", "plane": "affect", "max_batch": max_batch, "max_page": max_page}


class AffectWrites(abc.ABC):
    """``put_many`` for a store class, once: the protocol's signature and the
    validation into a :class:`~bifrost.writes.WriteRequest` (with the store's
    ``max_batch``), then the store's :meth:`perform_put`, which holds only what
    happens inside its transaction (see :mod:`bifrost.writes`).
    """

    max_batch: int

    def put_many(
        self,
        records: list[dict[str, Any]],
        *,
        idempotency_key: str,
        ctx: DispatchContext,
        expected_revisions: dict[str, int] | None = None,
        idempotency_class: str | None = None,
    ) -> dict[str, Any]:
        """Append the next revision of every record's key, atomically and idempotently:
        ``{"written": N, "replayed": bool}``.

        Raises InvalidArguments, IdempotencyConflict (same actor and key, other
        payload), RevisionMismatch (the first failing key of ``expected_revisions``,
        in its order); on any error nothing is written.
        """
        request = validate_put(
            records,
            expected_revisions,
            idempotency_key,
            idempotency_class,
            max_batch=self.max_batch,
        )
        return self.perform_put(request, ctx.actor)

    @abc.abstractmethod
    def perform_put(self, request: WriteRequest[ValidatedAffect], actor: str) -> dict[str, Any]:
        """The validated write of ``actor``, inside the store's transaction."""
