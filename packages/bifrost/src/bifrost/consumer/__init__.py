"""Consumer side of the wire: the plane apps (one builder, :func:`build_plane_app`,
for every plane of :mod:`bifrost.planes`) and the registration."""

from bifrost.consumer.app import (
    AppHooks,
    CallRecord,
    TokenVerifier,
    build_affect_app,
    build_memory_app,
    build_plane_app,
)
from bifrost.consumer.budget import DEFAULT_MAX_INFLIGHT_BODY_BYTES, BodyBudget
from bifrost.consumer.registration import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_JSON_CONTAINERS,
    ConsumerRegistration,
)

__all__ = [
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
]
