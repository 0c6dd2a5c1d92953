"""The stored form's columns on PostgreSQL (``ratatoskr.memory.records``): what every
read of a chunk selects, what every write sends, and the ``StoredChunk`` of a row.

A binary-form embedding is in ``embedding_f64`` (little-endian float64), or, when
every element is float32-exact, in ``embedding_f32`` (little-endian float32, half the
bytes; migration 7) — the SQLite store's forms, so both backends give back the same
floats. The JSON form has neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ratatoskr.memory.records import StoredChunk, StoredForm
from ratatoskr.postgres.arrays import BinaryArray, bytea_array, text_array

__all__ = ["STORED_COLUMNS", "blob_arrays", "stored_chunk"]

# The columns :func:`stored_chunk` reads, in its order.
STORED_COLUMNS = "record_json, embedding_key, embedding_f64, embedding_f32, revision"


def stored_chunk(row: Sequence[Any]) -> StoredChunk:
    """The chunk of a row holding :data:`STORED_COLUMNS` (and nothing else)."""
    record_json, key, f64, f32, revision = row
    return StoredChunk(
        str(record_json),
        None if key is None else str(key),
        f64,
        int(revision),
        embedding_f32=f32,
    )


def blob_arrays(forms: Sequence[StoredForm]) -> tuple[BinaryArray, BinaryArray, BinaryArray]:
    """``embedding_key``, ``embedding_f64`` and ``embedding_f32`` of a batch's stored
    forms, as the array parameters of a write."""
    return (
        text_array([f.embedding_key for f in forms]),
        bytea_array([f.embedding_f64 for f in forms]),
        bytea_array([f.embedding_f32 for f in forms]),
    )
