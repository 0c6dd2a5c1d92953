"""The keywords every affect store is opened with beside its database, declared
once (:class:`AffectOptions`: a store takes them as ``**options: Unpack[AffectOptions]``),
and their limits with the plane's defaults, checked (:func:`affect_limits`;
``AffectReads.take_options`` keeps them all)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypedDict

from bifrost.affect.validation import DEFAULT_MAX_BATCH, DEFAULT_MAX_PAGE
from bifrost.limits import check_affect_limits
from bifrost.quota import Quota
from bifrost.scope import DEFAULT_MAX_SCOPE_ANY
from bifrost.store_base import check_keywords

__all__ = ["AffectOptions", "affect_limits"]


class AffectOptions(TypedDict, total=False):
    """The keywords every affect store is opened with beside its database: the
    limits (positive integers), ``clock`` (seconds since the epoch: TTLs and
    ``recorded_at``) and the per-tenant ``quota`` (:mod:`bifrost.quota`)."""

    max_batch: int
    max_page: int
    max_scope_any: int
    clock: Callable[[], float]
    quota: Quota


def affect_limits(options: AffectOptions) -> tuple[int, int, int]:
    """``(max_batch, max_page, max_scope_any)`` of ``options`` (each absent one its
    default), checked. Raises TypeError for a keyword :class:`AffectOptions` does not
    name, InvalidLimits for a limit that is not a positive integer."""
    check_keywords("__init__", options, AffectOptions)
    limits = (
        options.get("max_batch", DEFAULT_MAX_BATCH),
        options.get("max_page", DEFAULT_MAX_PAGE),
        options.get("max_scope_any", DEFAULT_MAX_SCOPE_ANY),
    )
    check_affect_limits(max_batch=limits[0], max_page=limits[1], max_scope_any=limits[2])
    return limits
