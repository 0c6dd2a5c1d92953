"""How a chunk is stored, and the exact float64 scoring of stored chunks.

``record_json`` is the verbatim record as canonical JSON (INV-001:
``json.loads(record_json) == record``). Writing and reading it goes through
bifrost's orjson-backed codec: formatting and parsing the 384 floats of an
embedding with the standard library were the two slowest steps of a write and
of a search.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from bifrost.idempotency import canonical_json, json_loads_exact
from bifrost.memory.validation import embedding_field


def encode(record: dict[str, Any]) -> str:
    """``record_json`` of a validated record."""
    return canonical_json(record).decode("utf-8")


def load(record_json: str) -> dict[str, Any]:
    """The stored record, equal to the one written."""
    loaded: dict[str, Any] = json_loads_exact(record_json)
    return loaded


def embedding(loaded: dict[str, Any]) -> npt.NDArray[np.float64]:
    """The embedding of a stored record as float64."""
    return np.asarray(loaded[embedding_field(loaded)], dtype=np.float64)


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
