"""The limits a store is opened with, checked once per plane for every store of it:
:func:`check_memory_limits` and :func:`check_affect_limits` (which the plane's
protocol module names). A bad limit is :class:`InvalidLimits`, whichever the store:
configuration, never a call (nothing is written, no store is made)."""

from __future__ import annotations

from bifrost.errors import InvalidArguments

__all__ = ["InvalidLimits", "check_affect_limits", "check_memory_limits", "positive_limit"]


class InvalidLimits(InvalidArguments, ValueError):
    """A store opened with a limit that is not a positive integer. It is
    ``InvalidArguments`` (what the stores raised for a bad dimension) and a
    ``ValueError`` (what they raised for other limits), so either kind of caller
    catches it."""


def positive_limit(name: str, value: object) -> int:
    """``value`` when it is a positive ``int`` (not a bool); else InvalidLimits."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidLimits(f"{name} must be a positive integer")
    return value


def check_memory_limits(
    *, embedding_dim: int, max_batch: int, max_top_k: int, max_scope_any: int, max_page: int
) -> None:
    """What every memory store is opened with, each a positive integer. Raises
    InvalidLimits naming the first that is not."""
    positive_limit("embedding_dim", embedding_dim)
    positive_limit("max_batch", max_batch)
    positive_limit("max_top_k", max_top_k)
    positive_limit("max_scope_any", max_scope_any)
    positive_limit("max_page", max_page)


def check_affect_limits(*, max_batch: int, max_page: int, max_scope_any: int) -> None:
    """What every affect store is opened with, each a positive integer. Raises
    InvalidLimits."""
    for value in (max_batch, max_page, max_scope_any):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidLimits("max_batch, max_page and max_scope_any must be positive")
