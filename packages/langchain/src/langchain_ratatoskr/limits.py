"""What the memory plane accepts, as its ``health`` tells it (``embedding_dim``,
``max_batch``, ``max_page``): the dimension check, and ids cut into batches."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

__all__ = ["EmbeddingDimensionMismatch", "check_dim", "parts", "unique"]

_T = TypeVar("_T")


class EmbeddingDimensionMismatch(ValueError):
    """The embedder's vectors and the memory plane's ``embedding_dim`` differ."""


def check_dim(n: int, limits: Mapping[str, Any]) -> None:
    """Raise EmbeddingDimensionMismatch (naming both figures) unless a vector of ``n``
    numbers fits the plane."""
    dim = limits.get("embedding_dim")
    if isinstance(dim, int) and n != dim:
        raise EmbeddingDimensionMismatch(
            f"the embedder gives vectors of {n} dimensions, the memory plane stores {dim} "
            f"(RATATOSKR_MEMORY_EMBEDDING_DIM): use an embedder of {dim} dimensions, or a "
            f"memory plane of {n}"
        )


def unique(ids: Iterable[str]) -> list[str]:
    """``ids`` without repeats, in first-seen order."""
    return list(dict.fromkeys(ids))


def parts(items: Sequence[_T], limits: Mapping[str, Any]) -> list[list[_T]]:
    """``items`` in batches of the plane's ``max_batch``."""
    size = int(limits.get("max_batch") or 1000)
    return [list(items[i : i + size]) for i in range(0, len(items), size)]
