"""Retention of memory chunks: when a chunk is expired (memory-plane.md, "Retention").

A store opened with ``retention_s`` (``RATATOSKR_MEMORY_RETENTION_S``; None: keep
forever) treats a chunk whose last successful write is *more than* ``retention_s``
seconds old as gone: no read returns it, ``delete_many`` does not count it, and an
upsert of its id is a creation (revision 1; an ``expected_revisions`` entry for it
must be 0 or absent, as for an id never written — the expired revision is never
compared). A background sweep then erases it like a delete. Every backend decides
with :func:`expiry_cutoff` and :func:`is_expired`, once, here.
"""

from __future__ import annotations

import math

__all__ = ["expiry_cutoff", "is_expired", "validate_retention"]


def validate_retention(retention_s: float | None) -> float | None:
    """``retention_s`` itself when it is None or a positive finite number of seconds.
    Raises ValueError otherwise (a store refuses it when opened)."""
    if retention_s is None:
        return None
    if (
        isinstance(retention_s, bool)
        or not isinstance(retention_s, int | float)
        or not math.isfinite(retention_s)
        or retention_s <= 0
    ):
        raise ValueError("retention_s must be a positive number of seconds, or None")
    return float(retention_s)


def expiry_cutoff(now: float, retention_s: float | None) -> float | None:
    """The write time below which a chunk is expired at ``now`` (None: nothing expires)."""
    return None if retention_s is None else now - retention_s


def is_expired(written_at: float, cutoff: float | None) -> bool:
    """Whether a chunk last written at ``written_at`` is expired under ``cutoff``."""
    return cutoff is not None and written_at < cutoff
