"""The record fields an operator declares filterable (``metadata_filter``): their
names and paths. A leaf module (the provider's settings check the setting with it
without importing the memory plane)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["EMBEDDING_FIELDS", "field_path", "fields_setting", "validate_fields"]


def field_path(field: str) -> tuple[str, ...]:
    """``"metadata.kind"`` → ``("metadata", "kind")``. A field is a non-empty string
    of non-empty dot-separated parts (ValueError otherwise: it is configuration)."""
    if not isinstance(field, str) or not field:
        raise ValueError("a filterable field must be a non-empty string")
    parts = tuple(field.split("."))
    if any(not p for p in parts):
        raise ValueError(f"filterable field {field!r} has an empty path segment")
    return parts


# The fields a record's embedding may sit in (bifrost.memory.validation.embedding_field).
# No filter reads them: the stores keep an embedding apart from the record's JSON (as a
# float blob and in the vector index), and its numbers are not metadata.
EMBEDDING_FIELDS = frozenset({"embedding", "vector"})


def validate_fields(fields: Iterable[str]) -> tuple[str, ...]:
    """Declared filterable fields, each checked by :func:`field_path`, duplicates once,
    in the order given; a field in an embedding's place is refused. Raises ValueError."""
    out: dict[str, None] = {}
    for f in fields:
        if field_path(f)[0] in EMBEDDING_FIELDS:
            raise ValueError(
                f"filterable field {f!r} is where a record's embedding sits; "
                "filters compare metadata, not embeddings"
            )
        out[f] = None
    return tuple(out)


def fields_setting(value: str) -> tuple[str, ...]:
    """A comma-separated list of fields (``RATATOSKR_MEMORY_FILTERABLE_FIELDS``), blank
    parts ignored, each checked by :func:`field_path`. Raises ValueError."""
    return validate_fields(part.strip() for part in value.split(",") if part.strip())
