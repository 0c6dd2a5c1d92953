"""``build_memory_plane_app``: this store behind bifrost's memory app.

The plane knows nothing of HTTP beyond this hand-over: bifrost owns the routes,
token checks, envelope parsing, scope grants and error rendering. The builder
has the signature every Bifrost plane's builder has (affect's
``build_affect_plane_app``), so the provider builds each the same way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from bifrost.auth import JwtVerifier, ReplayCache
from bifrost.consumer import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_JSON_CONTAINERS,
    AppHooks,
    BodyBudget,
    ConsumerRegistration,
    build_memory_app,
)
from bifrost.memory.protocol import MemoryDataStore

if TYPE_CHECKING:  # starlette comes with bifrost; the plane never uses it directly
    from starlette.applications import Starlette

    from bifrost.consumer.app import Lifespan

__all__ = ["build_memory_plane_app", "build_memory_provider_app"]


def build_memory_plane_app(
    store: MemoryDataStore,
    heimdall_key: bytes,
    consumer_id: str = "ratatoskr",
    *,
    issuer: str = "heimdall",
    max_lifetime_s: float = 300,
    leeway_s: float = 30,
    replay_cache_size: int = 100_000,
    replay_cache: ReplayCache | None = None,
    previous_keys: Sequence[bytes] = (),
    clock: Callable[[], float] = time.time,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_json_containers: int = DEFAULT_MAX_JSON_CONTAINERS,
    hooks: AppHooks | None = None,
    body_budget: BodyBudget | None = None,
    heavy_calls: threading.Semaphore | None = None,
    maintenance_store: Any = None,
    lifespan: Lifespan | None = None,
) -> Starlette:
    """The standalone memory app (``POST /bifrost/handshake``, ``POST /bifrost/memory-call``).

    Tokens are verified with ``heimdall_key`` (HS256) for audience ``consumer_id``;
    the keyword arguments are the verifier's, the body limits and what the provider
    shares across its planes (``hooks``, ``body_budget``, ``heavy_calls``);
    ``maintenance_store`` and ``lifespan`` go to bifrost's app as they are.
    ``replay_cache`` is where accepted token ids are remembered: pass the one every
    process serving this store's file shares (default: this process's memory only).
    The app does not close ``store``: whoever opened it does.

    Raises TypeError for a missing store or one that does not advertise capabilities
    (INV-008), or a key that is not bytes; ValueError for an empty key or a bad limit.
    """
    if store is None or not isinstance(store.describe_store(), dict):
        raise TypeError("build_memory_plane_app requires a store that advertises capabilities")
    if not heimdall_key:
        raise ValueError("heimdall_key must be non-empty")
    verifier = JwtVerifier(
        heimdall_key,
        issuer=issuer,
        audience=consumer_id,
        max_lifetime_s=max_lifetime_s,
        leeway_s=leeway_s,
        replay_cache_size=replay_cache_size,
        replay_cache=replay_cache,
        previous_keys=previous_keys,
        clock=clock,
    )
    registration = ConsumerRegistration(
        consumer_id=consumer_id,
        planes=("memory",),
        max_body_bytes=max_body_bytes,
        max_json_containers=max_json_containers,
    )
    return build_memory_app(
        store,
        verifier,
        registration,
        maintenance_store,
        hooks,
        lifespan=lifespan,
        body_budget=body_budget,
        heavy_calls=heavy_calls,
    )


# The name this builder had before every plane's builder took one signature.
build_memory_provider_app = build_memory_plane_app
