"""Validation every memory store calls, so the rules of memory-plane.md live once.

All functions raise ``InvalidArguments`` / ``InvalidFilter`` with messages that
name the failing record by its index in the batch (or the failing argument),
never by its content, embedding or scope values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bifrost.errors import InvalidArguments
from bifrost.memory.filters import MetadataFilter, validate_filter
from bifrost.records import (
    DEFAULT_MAX_BATCH,
    MAX_ID_BYTES,
    CanonicalBatch,
    claim_id,
    json_copy,
    record_label,
    required_scope,
    validate_expected_revisions,
    validate_id,
    validate_ids,
    validate_records_common,
)
from bifrost.scope import DEFAULT_MAX_SCOPE_ANY, apply_grant, validate_scope
from bifrost.writes import WriteRequest, build_write_request, validate_idempotency

__all__ = [
    "DEFAULT_MAX_BATCH",
    "DEFAULT_MAX_PAGE",
    "DEFAULT_MAX_TOP_K",
    "MAX_ID_BYTES",
    "ScanQuery",
    "SearchQuery",
    "ValidatedChunk",
    "embedding_field",
    "json_copy",
    "record_id",
    "scan_item",
    "search_row",
    "unit_vector",
    "validate_embedding",
    "validate_expected_revisions",
    "validate_id",
    "validate_ids",
    "validate_records_common",
    "validate_scan",
    "validate_search",
    "validate_upsert",
]

DEFAULT_MAX_TOP_K = 1000
# Records a ``scan`` page may hold (``limit`` 1 … max_page; memory-plane.md "Beyond v1").
DEFAULT_MAX_PAGE = 1000
DEFAULT_PAGE = 100
_ID_FIELDS = ("id", "chunk_id", "memory_id")
_INCLUDE_KEYS = frozenset({"embedding"})


@dataclass(frozen=True)
class ValidatedChunk:
    """One upsert record after validation: its id, embedding, scope and the
    verbatim record (a private deep copy, safe to keep).

    What validation learnt on the way, so a store need not look again: ``floats``,
    every element of the record's embedding field is a float (exact type: the
    embedding is those very values); ``plain``, orjson alone writes the record's
    canonical JSON (:func:`bifrost.records.canonical_record`), and so any part of it.
    False claims nothing."""

    id: str
    embedding: list[float]
    scope: dict[str, str]
    record: dict[str, Any]
    floats: bool = False
    plain: bool = False


@dataclass(frozen=True)
class SearchQuery:
    vector: list[float]
    top_k: int
    scope_all: dict[str, str]
    scope_any: list[dict[str, str]]
    include_embedding: bool
    metadata_filter: MetadataFilter | None = None


@dataclass(frozen=True)
class ScanQuery:
    """A validated ``scan``: records in scope (and filter) whose id is above
    ``after_id`` (None: from the start), at most ``limit`` of them in id order."""

    scope_all: dict[str, str]
    scope_any: list[dict[str, str]]
    metadata_filter: MetadataFilter | None
    limit: int
    after_id: str | None
    include_embedding: bool


def record_id(record: dict[str, Any], index: int | None = None) -> str:
    """The record's id: ``id``, else ``chunk_id``, else ``memory_id`` (the first key
    present and not null). Missing or invalid → ``InvalidArguments``."""
    for name in _ID_FIELDS:
        if record.get(name) is not None:
            return validate_id(record[name], f"{record_label(index)}: {name}")
    raise InvalidArguments(f"{record_label(index)}: missing id (id, chunk_id or memory_id)")


def embedding_field(record: dict[str, Any]) -> str:
    """Which field holds the embedding: ``embedding`` if present, else ``vector``."""
    return "embedding" if "embedding" in record else "vector"


def validate_embedding(value: object, dim: int, what: str = "embedding") -> list[float]:
    """A list of JSON numbers (bools are not numbers), all finite, ``len == dim``,
    norm > 0. Returns the values as floats."""
    return _embedding(value, dim, what)[0]


def _embedding(value: object, dim: int, what: str) -> tuple[list[float], bool]:
    """:func:`validate_embedding`, and whether the values are the input's own elements:
    every one a float (exact type), so the copy is ``list(value)``."""
    if not isinstance(value, list):
        raise InvalidArguments(f"{what} must be a list of numbers")
    if len(value) != dim:
        raise InvalidArguments(f"{what} length {len(value)} != {dim}")
    # What embedding models send: plain floats. ``list.count`` compares by identity
    # first, so counting the exact type in the list of types is one C-level pass (a set
    # of the types hashes every element). The norm then settles them in one more: it is
    # inf or nan when any value is, so a finite non-zero norm means every value is finite.
    if [*map(type, value)].count(float) == dim:
        norm = math.hypot(*value)
        if norm > 0.0 and math.isfinite(norm):
            return list(value), True
    out: list[float] = []
    for x in value:
        if isinstance(x, bool) or not isinstance(x, int | float):
            raise InvalidArguments(f"{what} must contain only numbers")
        try:
            f = float(x)
        except OverflowError:
            raise InvalidArguments(f"{what} contains a non-finite number") from None
        if not math.isfinite(f):
            raise InvalidArguments(f"{what} contains a non-finite number")
        out.append(f)
    norm = math.hypot(*out)
    if not (norm > 0.0 and math.isfinite(norm)):
        raise InvalidArguments(f"{what} has zero (or overflowing) norm")
    return out, False


def unit_vector(values: list[float]) -> list[float]:
    """``values / ‖values‖`` (values already validated: finite, norm > 0)."""
    norm = math.hypot(*values)
    return [x / norm for x in values]


def validate_upsert(
    records: object,
    expected_revisions: object,
    idempotency_key: object,
    idempotency_class: object,
    *,
    embedding_dim: int,
    max_batch: int,
) -> WriteRequest[ValidatedChunk]:
    """Validate a whole ``upsert_many`` call before anything is written; the result
    is the write's request (a sequence of the validated chunks, see
    :class:`bifrost.writes.WriteRequest`).

    Checks: the idempotency key (non-empty, ≤ 256 chars) and class; the batch
    (a list of ≤ ``max_batch`` objects); per record the id, the embedding
    (``embedding`` else ``vector``), the scope (required; ``{}`` allowed), the
    reserved ``revision`` key, INV-007 (``origin == "injected_context"``
    requires a non-null ``injection_source``; any other record must not carry a
    non-null one); duplicate ids; ``expected_revisions`` (null or an object of
    ids of this batch → ints ≥ 0). Raises InvalidArguments.
    """
    key, cls = validate_idempotency(idempotency_key, idempotency_class)
    recs = validate_records_common(records, max_batch=max_batch)
    out: list[ValidatedChunk] = []
    seen: dict[str, int] = {}
    batch = CanonicalBatch()
    for i, rec in enumerate(recs):
        where = record_label(i)
        cid = record_id(rec, i)
        claim_id(seen, cid, i)
        if "revision" in rec:
            raise InvalidArguments(f"{where}: 'revision' is reserved (store-owned)")
        field = embedding_field(rec)
        if field not in rec:
            raise InvalidArguments(f"{where}: missing embedding")
        emb, exact = _embedding(rec[field], embedding_dim, f"{where}: {field}")
        scope = required_scope(rec, where)
        injected = rec.get("origin") == "injected_context"
        has_source = rec.get("injection_source") is not None
        if injected and not has_source:
            raise InvalidArguments(f"{where}: origin injected_context requires injection_source")
        if not injected and has_source:
            raise InvalidArguments(f"{where}: injection_source only allowed when injected")
        copy, plain = batch.add_copy(rec, i, floats_key=field if exact else None)
        out.append(ValidatedChunk(cid, emb, scope, copy, exact, plain))
    return build_write_request(
        "upsert_many",
        "upserted",
        out,
        list(seen),
        records=records,
        expected_revisions=expected_revisions,
        idempotency_key=key,
        idempotency_class=cls,
        records_json=batch.records_json,
    )


def _validate_include(include: object) -> bool:
    if include is None:
        return True
    if not isinstance(include, dict):
        raise InvalidArguments("include must be an object or null")
    if set(include) - _INCLUDE_KEYS:
        raise InvalidArguments("include accepts only the key 'embedding'")
    emb = include.get("embedding", True)
    if not isinstance(emb, bool):
        raise InvalidArguments("include.embedding must be a boolean")
    return emb


def validate_search(
    vector: object,
    top_k: object,
    scope_all: object,
    scope_any: object,
    metadata_filter: object,
    include: object,
    *,
    embedding_dim: int,
    max_top_k: int,
    max_scope_any: int = DEFAULT_MAX_SCOPE_ANY,
    filterable: Sequence[str] = (),
) -> SearchQuery:
    """Validate a ``search`` call: ``vector`` as an embedding; ``top_k`` an int
    (not bool) in 1…``max_top_k``; the scope filter (:func:`validate_scope`);
    ``metadata_filter`` over the ``filterable`` fields
    (:func:`bifrost.memory.filters.validate_filter`: null or ``{}`` without any);
    ``include`` null or ``{"embedding": bool}``.
    """
    vec, k = _vector_and_top_k(vector, top_k, embedding_dim, max_top_k)
    all_, any_ = validate_scope(scope_all, scope_any, max_any=max_scope_any)
    return _search_query(vec, k, all_, any_, metadata_filter, include, filterable)


def granted_search(
    args: Mapping[str, Any],
    grant: Mapping[str, str],
    *,
    embedding_dim: int,
    max_top_k: int,
    max_scope_any: int = DEFAULT_MAX_SCOPE_ANY,
    filterable: Sequence[str] = (),
) -> SearchQuery:
    """The ``search`` of a call's ``args`` under ``grant``, validated once, in the
    wire's order: the scope filter first, with the grant ANDed into ``scope_all``
    (:func:`bifrost.scope.apply_grant`: ``Forbidden`` on a contradicting axis), then
    the rest as :func:`validate_search` checks it."""
    all_, any_ = validate_scope(args.get("scope_all"), args.get("scope_any"), max_any=max_scope_any)
    all_ = apply_grant(all_, grant)
    vec, k = _vector_and_top_k(args["vector"], args["top_k"], embedding_dim, max_top_k)
    return _search_query(
        vec, k, all_, any_, args.get("metadata_filter"), args.get("include"), filterable
    )


def _vector_and_top_k(
    vector: object, top_k: object, embedding_dim: int, max_top_k: int
) -> tuple[list[float], int]:
    vec = validate_embedding(vector, embedding_dim, "vector")
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise InvalidArguments("top_k must be an integer")
    if not 1 <= top_k <= max_top_k:
        raise InvalidArguments(f"top_k must be in 1..{max_top_k} (RATATOSKR_MAX_TOP_K)")
    return vec, top_k


def _search_query(
    vec: list[float],
    top_k: int,
    scope_all: dict[str, str],
    scope_any: list[dict[str, str]],
    metadata_filter: object,
    include: object,
    filterable: Sequence[str],
) -> SearchQuery:
    mf = validate_filter(metadata_filter, filterable)
    return SearchQuery(vec, top_k, scope_all, scope_any, _validate_include(include), mf)


def validate_scan(
    scope_all: object,
    scope_any: object,
    metadata_filter: object,
    limit: object,
    after_id: object,
    include: object,
    *,
    max_page: int,
    max_scope_any: int = DEFAULT_MAX_SCOPE_ANY,
    filterable: Sequence[str] = (),
) -> ScanQuery:
    """Validate a ``scan`` call: the scope filter and ``metadata_filter`` as search's;
    ``limit`` null (100, or ``max_page`` when smaller) or an int (not bool) in
    1…``max_page``; ``after_id`` null or a chunk id; ``include`` as search's."""
    all_, any_ = validate_scope(scope_all, scope_any, max_any=max_scope_any)
    mf = validate_filter(metadata_filter, filterable)
    if limit is None:
        limit = min(DEFAULT_PAGE, max_page)
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidArguments("limit must be an integer")
    if not 1 <= limit <= max_page:
        raise InvalidArguments(f"limit must be in 1..{max_page} (RATATOSKR_MEMORY_MAX_PAGE)")
    after = None if after_id is None else validate_id(after_id, "after_id")
    return ScanQuery(all_, any_, mf, limit, after, _validate_include(include))


def search_row(
    record: dict[str, Any],
    chunk_id: str,
    score: float,
    revision: int,
    include_embedding: bool,
) -> dict[str, Any]:
    """One search result ``{chunk, chunk_id, score, recalled_view, revision}``.

    ``chunk`` is a copy of the stored record (without ``revision``); with
    ``include_embedding`` false the field that held the embedding is dropped.
    ``recalled_view`` is ``chunk["distillate"]`` when present and not null, else
    the chunk.
    """
    chunk = dict(record)
    chunk.pop("revision", None)
    if not include_embedding:
        chunk.pop(embedding_field(chunk), None)
    view = chunk["distillate"] if chunk.get("distillate") is not None else chunk
    return {
        "chunk": chunk,
        "chunk_id": chunk_id,
        "score": float(score),
        "recalled_view": view,
        "revision": revision,
    }


def scan_item(record: dict[str, Any], revision: int, include_embedding: bool) -> dict[str, Any]:
    """One ``scan`` item: the stored record (a copy) plus ``revision``; with
    ``include_embedding`` false the field that held the embedding is dropped."""
    item = dict(record)
    if not include_embedding:
        item.pop(embedding_field(item), None)
    item["revision"] = revision
    return item
