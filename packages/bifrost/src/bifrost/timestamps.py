"""The one format of a stored time on the wire (affect's ``recorded_at``): UTC RFC 3339
with microseconds and a ``Z`` suffix. Every affect store writes it with
:func:`rfc3339`, so the parity tests can compare stamps."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["rfc3339"]


def rfc3339(ts: float) -> str:
    """``ts`` (seconds since the epoch) as UTC RFC 3339 with microseconds and a ``Z``."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
