"""``build_affect_plane_app``: this store behind bifrost's affect app.

The plane knows nothing of HTTP beyond this hand-over: bifrost owns the
routes, token checks, envelope parsing, scope grants and error rendering. The
builder has the signature every Bifrost plane's builder has (memory's
``build_memory_plane_app``), so the provider builds each the same way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from bifrost.affect.protocol import AffectDataStore
from bifrost.auth import JwtVerifier, ReplayCache
from bifrost.consumer import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_JSON_CONTAINERS,
    AppHooks,
    BodyBudget,
    ConsumerRegistration,
    build_affect_app,
)

if TYPE_CHECKING:  # starlette comes with bifrost; the plane never uses it directly
    from starlette.applications import Starlette

    from bifrost.consumer.app import Lifespan

__all__ = ["build_affect_plane_app", "build_affect_provider_app"]


def build_affect_plane_app(
    store: AffectDataStore,
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
    """The standalone affect app (``POST /bifrost/handshake``, ``POST /bifrost/affect-call``).

    The arguments mean what they mean for ``build_memory_plane_app``. The app does
    not close ``store``: whoever opened it does. Raises ValueError for an empty key
    or a bad limit, TypeError when ``heimdall_key`` is not bytes or ``store`` does
    not implement ``AffectDataStore``.
    """
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
        planes=("affect",),
        max_body_bytes=max_body_bytes,
        max_json_containers=max_json_containers,
    )
    return build_affect_app(
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
build_affect_provider_app = build_affect_plane_app
