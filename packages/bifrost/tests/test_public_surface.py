"""The public surface of every bifrost facade, pinned (as httpx's ``test_exported_members``).

A name added to or dropped from a facade's ``__all__`` fails here until
:data:`SURFACE` says so: add the name to the module's entry below. The
import paths the seed contract names, and the homes modules were moved from,
must keep resolving to the same objects.
"""

from __future__ import annotations

import importlib
import importlib.util

import pytest

from bifrost.consumer.testing import InMemoryMemoryStore
from bifrost.reference_server import JwtVerifier

_ERRORS = {
    "BifrostError",
    "Forbidden",
    "IdempotencyConflict",
    "InvalidArguments",
    "InvalidFilter",
    "RevisionMismatch",
}
_SCOPE = {"SCOPE_LATTICE", "matches_scope", "validate_record_scope", "validate_scope"}
_KIT = {
    "SCORE_TOLERANCE",
    "AffectStoreConformance",
    "AffectStoreFactory",
    "ManualClock",
    "MemoryStoreConformance",
    "MemoryStoreFactory",
    "assert_wire_equal",
    "outcome",
    "run_parity",
}
_STORES = {"InMemoryAffectStore", "InMemoryMemoryStore"}
# The random parity sequences every backend runs (the kit's, not the reference facade's).
_WORKLOADS = {
    "AFFECT_KEYS",
    "MEMORY_DIM",
    "affect_envelope",
    "memory_workload",
    "run_affect_parity",
}

SURFACE: dict[str, set[str]] = {
    "bifrost": {
        "SCOPE_LATTICE",
        "WIRE_VERSION",
        "BifrostError",
        "DispatchContext",
        "Envelope",
        "Forbidden",
        "IdempotencyConflict",
        "InsufficientStorage",
        "Internal",
        "QuotaExceeded",
        "InvalidArguments",
        "InvalidFilter",
        "MalformedEnvelope",
        "PayloadTooLarge",
        "RevisionMismatch",
        "Unauthenticated",
        "Unavailable",
        "UnknownVerb",
        "UnsupportedVerb",
        "UnsupportedWireVersion",
        "__version__",
        "parse_envelope",
        "render_error",
    },
    "bifrost.memory": _ERRORS
    | _SCOPE
    | {
        "DEFAULT_MAX_BATCH",
        "DEFAULT_MAX_PAGE",
        "DEFAULT_MAX_TOP_K",
        "GATED_VERB_CAPABILITY",
        "MAX_ID_BYTES",
        "MEMORY_VERBS",
        "DispatchContext",
        "MemoryDataStore",
        "ScanQuery",
        "SearchQuery",
        "StoreCapabilities",
        "UnsupportedVerb",
        "ValidatedChunk",
        "dispatch_memory_call",
        "embedding_field",
        "json_copy",
        "memory_handshake",
        "record_id",
        "scan_item",
        "search_row",
        "unit_vector",
        "validate_embedding",
        "validate_expected_revisions",
        "validate_id",
        "validate_ids",
        "validate_records_common",
        "validate_scan",
        "validate_search",
        "validate_upsert",
    },
    "bifrost.affect": _ERRORS
    | _SCOPE
    | {
        "AFFECT_CAPABILITIES",
        "AFFECT_VERBS",
        "DEFAULT_MAX_BATCH",
        "DEFAULT_MAX_PAGE",
        "DEFAULT_PAGE_LIMIT",
        "RESERVED_AFFECT_FIELDS",
        "AffectDataStore",
        "DispatchContext",
        "HistoryQuery",
        "ListQuery",
        "ValidatedAffect",
        "affect_handshake",
        "dispatch_affect_call",
        "validate_history",
        "validate_key",
        "validate_keys",
        "validate_list",
        "validate_put",
    },
    "bifrost.auth": {
        "Claims",
        "InMemoryTokenCache",
        "JwtVerifier",
        "PendingToken",
        "TokenCache",
        "mint_token",
    },
    # Only the name the seed contract imports from here (its home is bifrost.auth).
    "bifrost.reference_server": {"JwtVerifier"},
    "bifrost.consumer": {
        "DEFAULT_MAX_BODY_BYTES",
        "DEFAULT_MAX_INFLIGHT_BODY_BYTES",
        "DEFAULT_MAX_JSON_CONTAINERS",
        "AppHooks",
        "BodyBudget",
        "CallRecord",
        "ConsumerRegistration",
        "TokenVerifier",
        "build_affect_app",
        "build_memory_app",
        "build_plane_app",
    },
    "bifrost.consumer.testing": _STORES,
    "bifrost.consumer.testing.conformance": _KIT | _WORKLOADS,
    "bifrost.jsoncodec": {"canonical_json", "json_loads_exact", "no_int64_overflow"},
    "bifrost.context": {"DEFAULT_CONSUMER_ID", "DispatchContext"},
    "bifrost.idempotency": {
        "IDEMPOTENCY_CLASSES",
        "MAX_IDEMPOTENCY_KEY_CHARS",
        "idempotency_id",
        "request_digest",
        "ttl_seconds",
        "validate_idempotency_key",
    },
    "bifrost.planes": {
        "AFFECT_PLANE",
        "MEMORY_PLANE",
        "PLANE_SPECS",
        "WIRE_PLANES",
        "PlaneDispatch",
        "PlaneSpec",
        "plane_spec",
    },
    "bifrost.client": {
        "AsyncBifrostClient",
        "BifrostClient",
        "WriteOptions",
        "WrongBaseURL",
        "build_envelope",
        "mint_token",
    },
    "bifrost.errors": {
        "BifrostError",
        "Forbidden",
        "IdempotencyConflict",
        "InsufficientStorage",
        "Internal",
        "QuotaExceeded",
        "InvalidArguments",
        "InvalidFilter",
        "MalformedEnvelope",
        "PayloadTooLarge",
        "RevisionMismatch",
        "Unauthenticated",
        "Unavailable",
        "UnknownVerb",
        "UnsupportedVerb",
        "UnsupportedWireVersion",
        "error_body",
        "error_from_wire",
        "loggable_id",
        "render_error",
    },
    "bifrost.dispatch": {
        "BASE_VERBS",
        "Handler",
        "VerbSpec",
        "check_args",
        "check_record_scopes",
        "coerce_envelope",
        "describe_store_verb",
        "dispatch_verb",
        "granted_scope",
        "guarded_write",
        "handshake_result",
        "health_verb",
        "max_scope_any",
        "plane_handshake",
        "record_scope_of",
        "require_inside",
        "safe_name",
        "visible",
        "visible_items",
    },
}

# (facade, name, home): the facade's name is the very object its home defines.
SAME_OBJECT = [
    ("bifrost.reference_server", "JwtVerifier", "bifrost.auth.verifier"),
    ("bifrost.auth", "InMemoryTokenCache", "bifrost.auth.token_cache"),
    ("bifrost.client", "mint_token", "bifrost.auth.tokens"),
    ("bifrost.consumer.testing", "InMemoryMemoryStore", "bifrost.consumer.testing.memory_store"),
    ("bifrost.consumer.testing", "InMemoryAffectStore", "bifrost.consumer.testing.affect_store"),
    (
        "bifrost.consumer.testing.conformance",
        "run_parity",
        "bifrost.consumer.testing.conformance.parity",
    ),
    (
        "bifrost.consumer.testing.conformance",
        "MemoryStoreConformance",
        "bifrost.consumer.testing.conformance.memory",
    ),
    (
        "bifrost.consumer.testing.conformance",
        "AffectStoreConformance",
        "bifrost.consumer.testing.conformance.affect",
    ),
    ("bifrost.consumer", "build_plane_app", "bifrost.consumer.app"),
]


@pytest.mark.parametrize("module_name", sorted(SURFACE))
def test_exported_members(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported)), f"{module_name}.__all__ repeats a name"
    assert set(exported) == SURFACE[module_name]
    for name in exported:
        assert getattr(module, name, None) is not None, f"{module_name}.{name} does not resolve"


@pytest.mark.parametrize(("facade", "name", "home"), SAME_OBJECT)
def test_facades_re_export_the_object_itself(facade: str, name: str, home: str) -> None:
    assert getattr(importlib.import_module(facade), name) is getattr(
        importlib.import_module(home), name
    )


def test_the_seed_contract_import_paths() -> None:
    assert JwtVerifier.__module__ == "bifrost.auth.verifier"
    assert InMemoryMemoryStore.__name__ == "InMemoryMemoryStore"


def test_one_name_one_home_the_reference_facade_is_gone() -> None:
    # The stores live in bifrost.consumer.testing, the kit in its conformance package;
    # a second path to them (bifrost.reference) was dropped on purpose.
    assert importlib.util.find_spec("bifrost.reference") is None
