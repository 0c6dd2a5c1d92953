"""What a write takes, checked before it touches the file: u32 ids, ``rec:N``/``node:N``
targets and JSON fields as the canonical text the store keeps.

A stored field is at most MAX_JSON_BYTES of canonical JSON: the bound lets a snapshot
decoder read one field whole with bounded memory.
"""

from __future__ import annotations

import re
from typing import Any

from ratatoskr.vmp.canonical import MAX_JSON_BYTES, canonical_json
from ratatoskr.vmp.errors import InvalidArgument

MAX_U32 = 0xFFFFFFFF

_TARGET = re.compile(r"(rec|node):(0|[1-9][0-9]{0,9})")
# The table and key column of each target kind.
_TARGET_TABLES = {"rec": ("vmp_records", "record_id"), "node": ("vmp_nodes", "node_id")}


def parse_target(target_id: object) -> tuple[str, int] | None:
    """``"rec:N"`` / ``"node:N"`` (N a canonical decimal u32) as (kind, N); None otherwise."""
    if not isinstance(target_id, str):
        return None
    match = _TARGET.fullmatch(target_id)
    if match is None:
        return None
    number = int(match.group(2))
    return (match.group(1), number) if number <= MAX_U32 else None


def target_table(kind: str) -> tuple[str, str]:
    """The table and key column holding a target of ``kind`` (``"rec"`` or ``"node"``)."""
    return _TARGET_TABLES[kind]


def check_u32(value: object, name: str) -> int | None:
    """``value`` when it is None or an unsigned 32-bit integer; InvalidArgument otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_U32:
        raise InvalidArgument(f"{name} must be an unsigned 32-bit integer")
    return value


def tags_json(tags: object) -> str | None:
    """The stored text of ``tags`` (an array of strings, or None)."""
    if tags is None:
        return None
    if not isinstance(tags, list | tuple) or not all(isinstance(tag, str) for tag in tags):
        raise InvalidArgument("tags must be an array of strings")
    return field_json(list(tags), "tags")


def field_json(value: Any, what: str) -> str | None:
    """The canonical text of a stored JSON field, at most MAX_JSON_BYTES of UTF-8.

    Over HTTP no field comes near the bound (request bodies are smaller).
    """
    if value is None:
        return None
    text = canonical_json(value)
    # A character is at most 4 bytes of UTF-8: most texts need no encoding to tell.
    if len(text) * 4 > MAX_JSON_BYTES and len(text.encode("utf-8")) > MAX_JSON_BYTES:
        raise InvalidArgument(f"{what} exceeds {MAX_JSON_BYTES} bytes as canonical JSON")
    return text
