"""The record fields an operator declares filterable (``metadata_filter``): their
names and paths. A leaf module (the provider's settings check the setting with it
without importing the memory plane)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["field_path", "fields_setting", "validate_fields"]


def field_path(field: str) -> tuple[str, ...]:
    """``"metadata.kind"`` → ``("metadata", "kind")``. A field is a non-empty string
    of non-empty dot-separated parts (ValueError otherwise: it is configuration)."""
    if not isinstance(field, str) or not field:
        raise ValueError("a filterable field must be a non-empty string")
    parts = tuple(field.split("."))
    if any(not p for p in parts):
        raise ValueError(f"filterable field {field!r} has an empty path segment")
    return parts


def validate_fields(fields: Iterable[str]) -> tuple[str, ...]:
    """Declared filterable fields, each checked by :func:`field_path`, duplicates once,
    in the order given. Raises ValueError."""
    out: dict[str, None] = {}
    for f in fields:
        field_path(f)
        out[f] = None
    return tuple(out)


def fields_setting(value: str) -> tuple[str, ...]:
    """A comma-separated list of fields (``RATATOSKR_MEMORY_FILTERABLE_FIELDS``), blank
    parts ignored, each checked by :func:`field_path`. Raises ValueError."""
    return validate_fields(part.strip() for part in value.split(",") if part.strip())
