"""Consumer side of the wire: the per-plane Starlette apps and the registration."""

from bifrost.consumer.app import (
    AppHooks,
    CallRecord,
    TokenVerifier,
    build_affect_app,
    build_memory_app,
)
from bifrost.consumer.registration import DEFAULT_MAX_BODY_BYTES, ConsumerRegistration

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "AppHooks",
    "CallRecord",
    "ConsumerRegistration",
    "TokenVerifier",
    "build_affect_app",
    "build_memory_app",
]
