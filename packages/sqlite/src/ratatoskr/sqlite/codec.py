"""How records are serialised at rest: compact JSON that round-trips exactly."""

from __future__ import annotations

import json
from typing import Any


def dumps(value: Any) -> str:
    """Compact JSON; NaN/Infinity are refused (they are not JSON and would not read back)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def loads(text: str) -> Any:
    """Inverse of :func:`dumps`."""
    return json.loads(text)
