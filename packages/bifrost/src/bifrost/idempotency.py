"""Idempotency helpers shared by every store: digests, ids, TTLs, keys.

INV-002: the idempotency id is the 4-tuple ``("default", verb, actor, key)``
(the class only tunes the TTL); the digest is SHA-256 over the canonical JSON
of ``{"records": …, "expected_revisions": … or {}}``. The JSON codec itself lives
in :mod:`bifrost.jsoncodec`.
"""

from __future__ import annotations

import hashlib
from typing import Any

from bifrost.errors import InvalidArguments
from bifrost.jsoncodec import canonical_json

__all__ = [
    "IDEMPOTENCY_CLASSES",
    "MAX_IDEMPOTENCY_KEY_CHARS",
    "idempotency_id",
    "request_digest",
    "ttl_seconds",
    "validate_idempotency_key",
]

IDEMPOTENCY_CLASSES: dict[str, int] = {
    "default": 24 * 3600,
    "ephemeral": 15 * 60,
    "durable": 7 * 24 * 3600,
}
MAX_IDEMPOTENCY_KEY_CHARS = 256


def request_digest(records: Any, expected_revisions: Any) -> str:
    """Hex SHA-256 of the canonical JSON of ``{"records", "expected_revisions" or {}}``."""
    payload = {"records": records, "expected_revisions": expected_revisions or {}}
    try:
        data = canonical_json(payload)
    except (TypeError, ValueError) as exc:
        raise InvalidArguments("records are not JSON-serialisable") from exc
    return hashlib.sha256(data).hexdigest()


def idempotency_id(verb: str, actor: str, key: str) -> str:
    """Canonical encoding of ``("default", verb, actor, key)`` (canonical JSON list)."""
    return canonical_json(["default", verb, actor, key]).decode("utf-8")


def ttl_seconds(idempotency_class: object) -> int:
    """TTL of a replay-cache entry: ``None``/``default`` 24 h, ``ephemeral`` 15 min,
    ``durable`` 7 days; anything else → ``InvalidArguments``."""
    if idempotency_class is None:
        return IDEMPOTENCY_CLASSES["default"]
    if isinstance(idempotency_class, str) and idempotency_class in IDEMPOTENCY_CLASSES:
        return IDEMPOTENCY_CLASSES[idempotency_class]
    raise InvalidArguments("idempotency_class must be one of default, ephemeral, durable")


def validate_idempotency_key(key: object) -> str:
    """A non-empty string of at most 256 characters, else ``InvalidArguments``."""
    if key is None:
        raise InvalidArguments("idempotency_key is required")
    if not isinstance(key, str) or not key:
        raise InvalidArguments("idempotency_key must be a non-empty string")
    if len(key) > MAX_IDEMPOTENCY_KEY_CHARS:
        raise InvalidArguments("idempotency_key longer than 256 characters")
    return key
