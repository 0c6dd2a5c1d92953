"""What every plane facade (:mod:`bifrost.memory`, :mod:`bifrost.affect`) gives a
store author beside its own plane's names, listed once: the dispatch context, the
typed errors a store raises, and the scope rules."""

from bifrost.context import DispatchContext
from bifrost.errors import (
    BifrostError,
    Forbidden,
    IdempotencyConflict,
    InvalidArguments,
    InvalidFilter,
    RevisionMismatch,
)
from bifrost.scope import SCOPE_LATTICE, matches_scope, validate_record_scope, validate_scope

__all__ = [
    "SCOPE_LATTICE",
    "BifrostError",
    "DispatchContext",
    "Forbidden",
    "IdempotencyConflict",
    "InvalidArguments",
    "InvalidFilter",
    "RevisionMismatch",
    "matches_scope",
    "validate_record_scope",
    "validate_scope",
]
