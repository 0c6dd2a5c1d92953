"""The keywords every memory store is opened with beside ``embedding_dim`` and its
database, declared once (:class:`MemoryOptions`: a store takes them as
``**options: Unpack[MemoryOptions]``), and their limits with the plane's defaults,
checked (:func:`memory_limits`; ``MemoryReads.take_options`` keeps them all)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypedDict

from bifrost.errors import InvalidArguments
from bifrost.fields import validate_fields
from bifrost.limits import check_memory_limits
from bifrost.memory.retention import validate_retention
from bifrost.memory.validation import DEFAULT_MAX_BATCH, DEFAULT_MAX_PAGE, DEFAULT_MAX_TOP_K
from bifrost.quota import Quota
from bifrost.scope import DEFAULT_MAX_SCOPE_ANY
from bifrost.store_base import check_keywords

__all__ = ["MemoryOptions", "memory_limits", "retention_and_fields"]


class MemoryOptions(TypedDict, total=False):
    """The keywords every memory store is opened with beside ``embedding_dim`` (and
    its database): the limits (positive integers), ``clock`` (seconds since the
    epoch: idempotency TTL, expiry), ``filterable_fields`` (what a ``metadata_filter``
    may name; none: v1), the per-tenant ``quota`` (:mod:`bifrost.quota`; none by
    default) and ``retention_s`` (None, the default: chunks never expire;
    :mod:`bifrost.memory.retention`)."""

    max_batch: int
    max_top_k: int
    max_scope_any: int
    clock: Callable[[], float]
    max_page: int
    filterable_fields: Iterable[str]
    quota: Quota
    retention_s: float | None


def memory_limits(embedding_dim: int, options: MemoryOptions) -> tuple[int, int, int, int]:
    """``(max_batch, max_top_k, max_scope_any, max_page)`` of ``options`` (each absent
    one its default), checked with ``embedding_dim``. Raises TypeError for a keyword
    :class:`MemoryOptions` does not name, InvalidLimits naming the first bad limit."""
    check_keywords("__init__", options, MemoryOptions)
    limits = (
        options.get("max_batch", DEFAULT_MAX_BATCH),
        options.get("max_top_k", DEFAULT_MAX_TOP_K),
        options.get("max_scope_any", DEFAULT_MAX_SCOPE_ANY),
        options.get("max_page", DEFAULT_MAX_PAGE),
    )
    check_memory_limits(
        embedding_dim=embedding_dim,
        max_batch=limits[0],
        max_top_k=limits[1],
        max_scope_any=limits[2],
        max_page=limits[3],
    )
    return limits


def retention_and_fields(
    retention_s: float | None, fields: Iterable[str]
) -> tuple[float | None, tuple[str, ...]]:
    """``retention_s`` and the filterable ``fields`` checked, as a store's open refuses
    them: InvalidArguments (nothing made yet), not the ValueError of the validators."""
    try:
        return validate_retention(retention_s), validate_fields(fields)
    except ValueError as exc:
        raise InvalidArguments(str(exc)) from None
