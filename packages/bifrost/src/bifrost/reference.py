"""The executable specification of the planes: the reference stores, whose
behaviour is the authoritative answer to "what must a store do", and the
conformance kit every real backend runs against itself (with the parity runner
that drives a backend and a reference store side by side).

A facade: the stores live in :mod:`bifrost.consumer.testing` (the seed
contract's ``bifrost.consumer.testing.InMemoryMemoryStore`` keeps working) and
the kit in :mod:`bifrost.consumer.testing.conformance`. The stores need nothing
beyond bifrost; the kit's names load on first use, since they need the
``testing`` extra (pytest, hypothesis).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from bifrost.consumer.testing import InMemoryAffectStore, InMemoryMemoryStore

if TYPE_CHECKING:
    from bifrost.consumer.testing.conformance import (
        SCORE_TOLERANCE,
        AffectStoreConformance,
        AffectStoreFactory,
        ManualClock,
        MemoryStoreConformance,
        MemoryStoreFactory,
        assert_wire_equal,
        outcome,
        run_parity,
    )

__all__ = [
    "SCORE_TOLERANCE",
    "AffectStoreConformance",
    "AffectStoreFactory",
    "InMemoryAffectStore",
    "InMemoryMemoryStore",
    "ManualClock",
    "MemoryStoreConformance",
    "MemoryStoreFactory",
    "assert_wire_equal",
    "outcome",
    "run_parity",
]

_KIT = "bifrost.consumer.testing.conformance"
_KIT_NAMES = frozenset(__all__) - {"InMemoryAffectStore", "InMemoryMemoryStore"}


def __getattr__(name: str) -> Any:
    """The conformance kit's names, imported when first asked for (they need pytest)."""
    if name in _KIT_NAMES:
        value = getattr(importlib.import_module(_KIT), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
