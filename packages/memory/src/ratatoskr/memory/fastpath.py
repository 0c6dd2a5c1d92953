"""bifrost's validation, without its per-number Python loop for plainly valid vectors.

``bifrost.memory.validation`` owns every rule and every error message. Checking
an embedding there is a Python loop over its numbers (about a millisecond for
384 of them on a slow machine, more than the whole scoped search), and
``json_copy`` formats and parses every digit of it again. Here a vector is first
tested against a cheap *sufficient* condition for bifrost to accept it: a list
of ``dim`` Python floats, all finite, with a non-zero finite norm — exactly
what ``validate_embedding`` accepts, restricted to plain floats. When every
vector passes, bifrost validates the call with a one-number stand-in in each
vector's place (so every other rule, in bifrost's order, still runs there) and
the real vectors are put back; when any vector does not, the untouched call goes
through bifrost as it is, so each rejection is bifrost's own.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from bifrost.memory.validation import (
    SearchQuery,
    ValidatedChunk,
    embedding_field,
    validate_search,
    validate_upsert,
)
from ratatoskr.memory.records import plain_floats

_STAND_IN = 1.0


def plainly_valid(values: object, dim: int) -> bool:
    """Whether bifrost's ``validate_embedding`` surely accepts ``values`` (see the
    module doc)."""
    if not plain_floats(values, dim):
        return False
    assert isinstance(values, list)
    # The very norm bifrost checks. It is inf when any value is inf and nan when any
    # is nan, so a finite norm also means every value is finite.
    norm = math.hypot(*values)
    return norm > 0.0 and math.isfinite(norm)


def checked_search(
    vector: object,
    top_k: object,
    scope_all: object,
    scope_any: object,
    metadata_filter: object,
    include: object,
    *,
    embedding_dim: int,
    max_top_k: int,
) -> tuple[SearchQuery, npt.NDArray[np.float64]]:
    """``validate_search`` plus the query vector as float64. Raises what it raises."""
    if not plainly_valid(vector, embedding_dim):
        query = validate_search(
            vector,
            top_k,
            scope_all,
            scope_any,
            metadata_filter,
            include,
            embedding_dim=embedding_dim,
            max_top_k=max_top_k,
        )
        return query, np.asarray(query.vector, dtype=np.float64)
    query = validate_search(
        [_STAND_IN],
        top_k,
        scope_all,
        scope_any,
        metadata_filter,
        include,
        embedding_dim=1,
        max_top_k=max_top_k,
    )
    assert isinstance(vector, list)
    return dataclasses.replace(query, vector=vector), np.asarray(vector, dtype=np.float64)


def checked_upsert(
    records: object,
    expected_revisions: object,
    idempotency_key: object,
    idempotency_class: object,
    *,
    embedding_dim: int,
    max_batch: int,
) -> list[ValidatedChunk]:
    """``validate_upsert``, same result and same errors. Raises what it raises."""
    vectors = _plain_vectors(records, embedding_dim)
    if vectors is None:
        return validate_upsert(
            records,
            expected_revisions,
            idempotency_key,
            idempotency_class,
            embedding_dim=embedding_dim,
            max_batch=max_batch,
        )
    assert isinstance(records, list)
    stand_ins = [
        {**record, field: [_STAND_IN]} for record, (field, _) in zip(records, vectors, strict=True)
    ]
    chunks = validate_upsert(
        stand_ins,
        expected_revisions,
        idempotency_key,
        idempotency_class,
        embedding_dim=1,
        max_batch=max_batch,
    )
    out: list[ValidatedChunk] = []
    for chunk, (field, values) in zip(chunks, vectors, strict=True):
        # chunk.record is bifrost's private JSON copy; a float needs no copy, so a new
        # list of the same floats is what json_copy would have produced.
        chunk.record[field] = list(values)
        out.append(dataclasses.replace(chunk, embedding=list(values)))
    return out


def _plain_vectors(records: object, dim: int) -> list[tuple[str, list[float]]] | None:
    if type(records) is not list:
        return None
    out: list[tuple[str, list[float]]] = []
    for record in records:
        if type(record) is not dict:
            return None
        field = embedding_field(record)
        values: Any = record.get(field)
        if not plainly_valid(values, dim):
            return None
        out.append((field, values))
    return out
