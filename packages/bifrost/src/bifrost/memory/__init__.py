"""The memory plane surface of the Bifrost wire: the store protocol, its
capabilities, the typed errors stores raise, the shared validators, and
transport-free dispatch."""

from bifrost.context import DispatchContext
from bifrost.errors import (
    BifrostError,
    Forbidden,
    IdempotencyConflict,
    InvalidArguments,
    InvalidFilter,
    RevisionMismatch,
    UnsupportedVerb,
)
from bifrost.memory.capabilities import GATED_VERB_CAPABILITY, StoreCapabilities
from bifrost.memory.dispatch import MEMORY_VERBS, dispatch_memory_call, memory_handshake
from bifrost.memory.protocol import MemoryDataStore
from bifrost.memory.validation import (
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_TOP_K,
    MAX_ID_BYTES,
    SearchQuery,
    ValidatedChunk,
    embedding_field,
    json_copy,
    record_id,
    search_row,
    unit_vector,
    validate_embedding,
    validate_expected_revisions,
    validate_id,
    validate_ids,
    validate_records_common,
    validate_search,
    validate_upsert,
)
from bifrost.scope import SCOPE_LATTICE, matches_scope, validate_record_scope, validate_scope

__all__ = [
    "DEFAULT_MAX_BATCH",
    "DEFAULT_MAX_TOP_K",
    "GATED_VERB_CAPABILITY",
    "MAX_ID_BYTES",
    "MEMORY_VERBS",
    "SCOPE_LATTICE",
    "BifrostError",
    "DispatchContext",
    "Forbidden",
    "IdempotencyConflict",
    "InvalidArguments",
    "InvalidFilter",
    "MemoryDataStore",
    "RevisionMismatch",
    "SearchQuery",
    "StoreCapabilities",
    "UnsupportedVerb",
    "ValidatedChunk",
    "dispatch_memory_call",
    "embedding_field",
    "json_copy",
    "matches_scope",
    "memory_handshake",
    "record_id",
    "search_row",
    "unit_vector",
    "validate_embedding",
    "validate_expected_revisions",
    "validate_id",
    "validate_ids",
    "validate_record_scope",
    "validate_records_common",
    "validate_scope",
    "validate_search",
    "validate_upsert",
]
