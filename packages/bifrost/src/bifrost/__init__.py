"""Bifrost wire v0.6: envelope, per-dispatch JWT, scope grants, typed errors,
plane apps, reference stores and a conformance kit. See README.md."""

from bifrost.context import DispatchContext
from bifrost.envelope import WIRE_VERSION, Envelope, parse_envelope
from bifrost.errors import (
    BifrostError,
    Forbidden,
    IdempotencyConflict,
    Internal,
    InvalidArguments,
    InvalidFilter,
    MalformedEnvelope,
    PayloadTooLarge,
    RevisionMismatch,
    Unauthenticated,
    UnknownVerb,
    UnsupportedVerb,
    UnsupportedWireVersion,
    render_error,
)
from bifrost.scope import SCOPE_LATTICE

__version__ = "0.8.0"

__all__ = [
    "SCOPE_LATTICE",
    "WIRE_VERSION",
    "BifrostError",
    "DispatchContext",
    "Envelope",
    "Forbidden",
    "IdempotencyConflict",
    "Internal",
    "InvalidArguments",
    "InvalidFilter",
    "MalformedEnvelope",
    "PayloadTooLarge",
    "RevisionMismatch",
    "Unauthenticated",
    "UnknownVerb",
    "UnsupportedVerb",
    "UnsupportedWireVersion",
    "__version__",
    "parse_envelope",
    "render_error",
]
