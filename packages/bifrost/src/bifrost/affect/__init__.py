"""The affect plane surface of the Bifrost wire (a blind conduit): the store
protocol, its capabilities, the typed errors, shared validators and dispatch."""

from bifrost.affect.dispatch import AFFECT_VERBS, affect_handshake, dispatch_affect_call
from bifrost.affect.protocol import AFFECT_CAPABILITIES, AffectDataStore
from bifrost.affect.validation import (
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_PAGE,
    DEFAULT_PAGE_LIMIT,
    RESERVED_AFFECT_FIELDS,
    HistoryQuery,
    ListQuery,
    ValidatedAffect,
    validate_history,
    validate_key,
    validate_keys,
    validate_list,
    validate_put,
)
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
    "AFFECT_CAPABILITIES",
    "AFFECT_VERBS",
    "DEFAULT_MAX_BATCH",
    "DEFAULT_MAX_PAGE",
    "DEFAULT_PAGE_LIMIT",
    "RESERVED_AFFECT_FIELDS",
    "SCOPE_LATTICE",
    "AffectDataStore",
    "BifrostError",
    "DispatchContext",
    "Forbidden",
    "HistoryQuery",
    "IdempotencyConflict",
    "InvalidArguments",
    "InvalidFilter",
    "ListQuery",
    "RevisionMismatch",
    "ValidatedAffect",
    "affect_handshake",
    "dispatch_affect_call",
    "matches_scope",
    "validate_history",
    "validate_key",
    "validate_keys",
    "validate_list",
    "validate_put",
    "validate_record_scope",
    "validate_scope",
]
