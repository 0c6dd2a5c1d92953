"""``build_memory_provider_app``: the thin wiring of the seed's last FN block."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.applications import Starlette

from bifrost.auth import JwtVerifier, ReplayCache
from bifrost.consumer import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_JSON_CONTAINERS,
    ConsumerRegistration,
    build_memory_app,
)
from bifrost.memory.protocol import MemoryDataStore


def build_memory_provider_app(
    store: MemoryDataStore,
    heimdall_key: bytes,
    consumer_id: str = "ratatoskr",
    *,
    issuer: str = "heimdall",
    max_lifetime_s: float = 300,
    leeway_s: float = 30,
    max_body_bytes: int | None = None,
    max_json_containers: int = DEFAULT_MAX_JSON_CONTAINERS,
    replay_cache: ReplayCache | None = None,
    previous_keys: Sequence[bytes] = (),
    **app_kwargs: Any,
) -> Starlette:
    """Wire a JwtVerifier and a registration, and hand ``store`` to bifrost's memory app.

    ``replay_cache`` is where accepted token ids are remembered; pass the one every
    process serving this store's file shares (default: this process's memory only).

    Raises ValueError for an empty ``heimdall_key`` and TypeError for a missing store
    or a store that does not advertise capabilities (INV-008).
    """
    if store is None or not isinstance(store.describe_store(), dict):
        raise TypeError("build_memory_provider_app requires a store that advertises capabilities")
    if not heimdall_key:
        raise ValueError("heimdall_key must be non-empty")
    verifier = JwtVerifier(
        bytes(heimdall_key),
        issuer=issuer,
        audience=consumer_id,
        max_lifetime_s=max_lifetime_s,
        leeway_s=leeway_s,
        replay_cache=replay_cache,
        previous_keys=previous_keys,
    )
    registration = ConsumerRegistration(
        consumer_id=consumer_id,
        planes=("memory",),
        max_body_bytes=DEFAULT_MAX_BODY_BYTES if max_body_bytes is None else max_body_bytes,
        max_json_containers=max_json_containers,
    )
    return build_memory_app(store=store, verifier=verifier, registration=registration, **app_kwargs)
