"""Validation every affect store calls (rules of affect-plane.md, once).

Defaults decided here (the spec is silent): ``history`` / ``list`` ``limit``
defaults to 50 and must be an int in 1…``max_page`` (default 500);
``before_revision`` is null or an int ≥ 1; ``after_key`` is null or a valid
key. Duplicate keys within one ``put_many`` batch → ``InvalidArguments``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from bifrost.errors import InvalidArguments
from bifrost.records import (
    DEFAULT_MAX_BATCH,
    CanonicalBatch,
    claim_id,
    load_canonical,
    record_label,
    required_scope,
    validate_id,
    validate_ids,
    validate_records_common,
)
from bifrost.scope import DEFAULT_MAX_SCOPE_ANY, validate_scope
from bifrost.writes import WriteRequest, build_write_request, validate_idempotency

__all__ = [
    "DEFAULT_MAX_BATCH",
    "DEFAULT_MAX_PAGE",
    "DEFAULT_PAGE_LIMIT",
    "RESERVED_AFFECT_FIELDS",
    "HistoryQuery",
    "ListQuery",
    "ValidatedAffect",
    "validate_history",
    "validate_key",
    "validate_keys",
    "validate_list",
    "validate_put",
]

DEFAULT_MAX_PAGE = 500
DEFAULT_PAGE_LIMIT = 50
RESERVED_AFFECT_FIELDS = ("revision", "recorded_at")


@dataclass(frozen=True)
class ValidatedAffect:
    """One put record after validation: its key, its scope and ``record_json``, the
    record's canonical JSON (what a store keeps; a conduit never needs more).
    ``record`` is a private verbatim copy, parsed from it on first use."""

    key: str
    scope: dict[str, str]
    record_json: str
    plain: bool = True  # orjson alone wrote record_json (bifrost.records.canonical_record)

    @functools.cached_property
    def record(self) -> dict[str, Any]:
        return load_canonical(self.record_json, self.plain)


@dataclass(frozen=True)
class HistoryQuery:
    key: str
    limit: int
    before_revision: int | None


@dataclass(frozen=True)
class ListQuery:
    scope_all: dict[str, str]
    scope_any: list[dict[str, str]]
    limit: int
    after_key: str | None


def validate_key(key: object, what: str = "key") -> str:
    """A non-empty string of at most 512 bytes UTF-8."""
    return validate_id(key, what)


def validate_keys(keys: object, *, max_batch: int) -> list[str]:
    """A list of at most ``max_batch`` keys; order and duplicates kept."""
    return validate_ids(keys, max_batch=max_batch, what="keys")


def validate_put(
    records: object,
    expected_revisions: object,
    idempotency_key: object,
    idempotency_class: object,
    *,
    max_batch: int,
) -> WriteRequest[ValidatedAffect]:
    """Validate a whole ``put_many`` call: idempotency key/class; a list of ≤
    ``max_batch`` objects each with a valid ``key`` and ``scope`` (required,
    ``{}`` allowed) and none of the reserved ``revision`` / ``recorded_at``;
    no duplicate keys; ``expected_revisions`` null or keys of this batch → ints ≥ 0.
    The result is the write's request (a sequence of the validated records, see
    :class:`bifrost.writes.WriteRequest`). Raises InvalidArguments.
    """
    idem_key, cls = validate_idempotency(idempotency_key, idempotency_class)
    recs = validate_records_common(records, max_batch=max_batch)
    out: list[ValidatedAffect] = []
    seen: dict[str, int] = {}
    batch = CanonicalBatch()
    for i, rec in enumerate(recs):
        where = record_label(i)
        if "key" not in rec:
            raise InvalidArguments(f"{where}: missing key")
        key = validate_key(rec["key"], f"{where}: key")
        claim_id(seen, key, i, "a key")
        for name in RESERVED_AFFECT_FIELDS:
            if name in rec:
                raise InvalidArguments(f"{where}: '{name}' is reserved (store-owned)")
        scope = required_scope(rec, where)
        text, plain = batch.add(rec, i)
        out.append(ValidatedAffect(key, scope, text.decode("utf-8"), plain))
    return build_write_request(
        "put_many",
        "written",
        out,
        list(seen),
        records=records,
        expected_revisions=expected_revisions,
        idempotency_key=idem_key,
        idempotency_class=cls,
        records_json=batch.records_json,
    )


def _limit(limit: object, max_page: int) -> int:
    if limit is None:
        return min(DEFAULT_PAGE_LIMIT, max_page)
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidArguments("limit must be an integer")
    if not 1 <= limit <= max_page:
        raise InvalidArguments(f"limit must be in 1..{max_page} (RATATOSKR_MAX_PAGE)")
    return limit


def validate_history(
    key: object, limit: object, before_revision: object, *, max_page: int
) -> HistoryQuery:
    """``history`` arguments: a valid key, ``limit`` (default 50, 1…max_page),
    ``before_revision`` null or an int ≥ 1."""
    k = validate_key(key)
    lim = _limit(limit, max_page)
    if before_revision is not None and (
        isinstance(before_revision, bool)
        or not isinstance(before_revision, int)
        or before_revision < 1
    ):
        raise InvalidArguments("before_revision must be an integer >= 1 or null")
    return HistoryQuery(k, lim, before_revision)


def validate_list(
    scope_all: object,
    scope_any: object,
    limit: object,
    after_key: object,
    *,
    max_page: int,
    max_scope_any: int = DEFAULT_MAX_SCOPE_ANY,
) -> ListQuery:
    """``list`` arguments: the scope filter, ``limit`` (default 50, 1…max_page),
    ``after_key`` null or a valid key."""
    all_, any_ = validate_scope(scope_all, scope_any, max_any=max_scope_any)
    lim = _limit(limit, max_page)
    ak = None if after_key is None else validate_key(after_key, "after_key")
    return ListQuery(all_, any_, lim, ak)
