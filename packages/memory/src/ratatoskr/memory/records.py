"""How a chunk is laid out at rest, and the exact float64 scoring of stored chunks.

``record_json`` holds the verbatim record, except that an embedding which is a
list of JSON floats (what every embedding model sends) is packed: the string
``base64(little-endian float64 bytes)`` stands in its place. A float64 holds a
JSON float exactly, so the record read back is equal to the one written, but
neither side formats or parses thousands of digits any more (``repr`` of 384
floats and parsing them back are the two slowest steps of a write and of a
search), and the row is half the size. A valid record's embedding is always a
list, so a string in that place can only be this packing: rows written before
it, and embeddings holding integers (which must come back as integers), keep
the plain list, and both read back the same way.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import numpy.typing as npt

from bifrost.memory.validation import embedding_field
from ratatoskr.sqlite import codec

_F64 = np.dtype("<f8")


def plain_floats(values: object, dim: int) -> bool:
    """Whether ``values`` is a list of exactly ``dim`` Python floats (no ints, bools
    or float subclasses): what is packed, and what the fast path of
    :mod:`ratatoskr.memory.fastpath` accepts."""
    return type(values) is list and len(values) == dim and set(map(type, values)) == {float}


def encode(record: dict[str, Any], dim: int) -> str:
    """``record_json`` of a validated record (see the module doc)."""
    field = embedding_field(record)
    values = record.get(field)
    if not plain_floats(values, dim):
        return codec.dumps(record)
    packed = base64.b64encode(np.asarray(values, dtype=_F64).tobytes()).decode("ascii")
    return codec.dumps({**record, field: packed})


def load(record_json: str) -> dict[str, Any]:
    """The stored JSON as is (the embedding possibly still packed)."""
    loaded: dict[str, Any] = codec.loads(record_json)
    return loaded


def embedding(loaded: dict[str, Any]) -> npt.NDArray[np.float64]:
    """The embedding of a :func:`load` ed record as float64."""
    value = loaded[embedding_field(loaded)]
    if type(value) is str:
        return np.frombuffer(base64.b64decode(value), dtype=_F64)
    return np.asarray(value, dtype=np.float64)


def unpack(
    loaded: dict[str, Any],
    *,
    with_embedding: bool = True,
    raw: npt.NDArray[np.float64] | None = None,
) -> dict[str, Any]:
    """The record as written, from a :func:`load` ed one (changed in place); ``raw``
    is its :func:`embedding` when the caller already has it. Without
    ``with_embedding`` a packed embedding becomes ``None`` instead (for a caller that
    drops the field anyway)."""
    field = embedding_field(loaded)
    if type(loaded.get(field)) is str:
        if not with_embedding:
            loaded[field] = None
        else:
            loaded[field] = (embedding(loaded) if raw is None else raw).tolist()
    return loaded


def exact_scores(
    raw: list[npt.NDArray[np.float64]], exact_query: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """Cosine of each raw embedding with the float64 unit ``exact_query``, clamped to
    [-1, 1].

    Rows are scaled by their largest component before normalising (so 1e308 does not
    overflow and 5e-324 does not vanish), as :func:`ratatoskr.memory.index.unit_float64`
    does. Only element-wise operations and row-wise reductions are used, never a
    BLAS matrix product, whose result for a row can depend on where the row sits in
    the batch: equal embeddings must get bit-equal scores so ties fall to chunk_id.
    """
    if not raw:
        return np.zeros(0, dtype=np.float64)
    m = np.stack(raw).astype(np.float64, copy=False)
    m = m / np.max(np.abs(m), axis=1, keepdims=True)
    m = m / np.sqrt(np.sum(m * m, axis=1, keepdims=True))
    scores: npt.NDArray[np.float64] = np.clip(np.sum(m * exact_query, axis=1), -1.0, 1.0)
    return scores
