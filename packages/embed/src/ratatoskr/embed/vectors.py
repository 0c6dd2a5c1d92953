"""What every adapter does alike: check the texts it is given, and turn a model's rows into
unit vectors of the declared dimension (or refuse them)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ratatoskr.embed.errors import EmbedderInputError, EmbedderResponseInvalid

# Models trained with asymmetric instructions; the adapters add them, callers never do.
E5_QUERY_PREFIX = "query: "
E5_PASSAGE_PREFIX = "passage: "


def check_texts(texts: Sequence[str]) -> list[str]:
    """The texts as a list; raises ``EmbedderInputError`` for a bare ``str`` or a non-str item."""
    if isinstance(texts, str | bytes):
        raise EmbedderInputError("embed_documents takes a list of texts, not one text")
    out = list(texts)
    for text in out:
        if not isinstance(text, str):
            raise EmbedderInputError("every text must be a str")
    return out


def check_text(text: str) -> str:
    """The query text; raises ``EmbedderInputError`` when it is not a ``str``."""
    if not isinstance(text, str):
        raise EmbedderInputError("embed_query takes one text (a str)")
    return text


def batches(texts: list[str], size: int) -> Iterator[list[str]]:
    """``texts`` in consecutive slices of at most ``size``."""
    for start in range(0, len(texts), size):
        yield texts[start : start + size]


def e5_prefixes(model: str) -> tuple[str, str]:
    """(query prefix, passage prefix) a model of this name was trained with.

    The e5 family (``intfloat/e5-*``, ``multilingual-e5-*``) needs ``query: `` and
    ``passage: ``; for any other name both are empty.
    """
    tail = model.rsplit("/", 1)[-1].lower()
    if tail.startswith(("e5-", "multilingual-e5-")):
        return E5_QUERY_PREFIX, E5_PASSAGE_PREFIX
    return "", ""


def unit_rows(rows: Any, *, count: int, dim: int) -> list[list[float]]:
    """``rows`` (``count`` × ``dim``, any array-like of numbers) scaled to unit length.

    Raises ``EmbedderResponseInvalid`` when the shape is wrong or a row is not finite or is all
    zeros (a zero vector has no direction to search by).
    """
    if count == 0:
        return []
    try:
        matrix = np.asarray(rows, dtype=np.float64)
    except (TypeError, ValueError):
        raise EmbedderResponseInvalid(
            "the embedder returned something that is not numbers"
        ) from None
    if matrix.shape != (count, dim):
        raise EmbedderResponseInvalid(
            f"the embedder returned {_shape(matrix)} where {count} vectors of {dim} were expected"
        )
    if not np.isfinite(matrix).all():
        raise EmbedderResponseInvalid("the embedder returned a vector that is not finite")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    if not (norms > 0).all():
        raise EmbedderResponseInvalid("the embedder returned an all-zero vector")
    result: list[list[float]] = (matrix / norms).tolist()
    return result


def _shape(matrix: np.ndarray[Any, Any]) -> str:
    if matrix.ndim == 2:
        return f"{matrix.shape[0]} vectors of {matrix.shape[1]}"
    return f"an array of shape {matrix.shape}"
