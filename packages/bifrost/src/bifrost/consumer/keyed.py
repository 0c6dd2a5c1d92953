"""``build_keyed_plane_app``: a Bifrost plane's app from its store and the
Heimdall key.

Every plane package hands its store to bifrost the same way: an HS256
:class:`~bifrost.auth.JwtVerifier` for the consumer's audience, a
:class:`~bifrost.consumer.ConsumerRegistration` declaring that one plane, and
:func:`~bifrost.consumer.app.build_plane_app`. That wiring lives here once; a
plane package's builder (``build_memory_provider_app``, ``build_affect_provider_app``)
calls this function with its :class:`~bifrost.planes.PlaneSpec`, and the provider
calls it with the spec from its plane table, so every plane is built one way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from bifrost.auth import JwtVerifier, TokenCache
from bifrost.consumer.app import AppHooks, build_plane_app
from bifrost.consumer.budget import BodyBudget
from bifrost.consumer.registration import ConsumerRegistration
from bifrost.context import DEFAULT_CONSUMER_ID
from bifrost.planes import PlaneSpec

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from bifrost.consumer.app import Lifespan

__all__ = ["PlaneAppOptions", "build_keyed_plane_app"]

_S = TypeVar("_S")


class PlaneAppOptions(TypedDict, total=False):
    """The keyword options of a plane's app builder; an option left out takes the
    default of the object it configures.

    ``issuer``, ``max_lifetime_s``, ``leeway_s``, ``token_cache_size``,
    ``token_cache`` (where accepted token ids are remembered: pass the one every
    process serving the store shares; default this process's memory only),
    ``previous_keys`` and ``clock`` go to the verifier; ``max_body_bytes`` and
    ``max_json_containers`` to the registration; ``hooks``, ``body_budget``,
    ``heavy_calls`` (what a provider shares across its planes),
    ``maintenance_store`` and ``lifespan`` to the app.
    """

    issuer: str
    max_lifetime_s: float
    leeway_s: float
    token_cache_size: int
    token_cache: TokenCache | None
    previous_keys: Sequence[bytes]
    clock: Callable[[], float]
    max_body_bytes: int
    max_json_containers: int
    hooks: AppHooks | None
    body_budget: BodyBudget | None
    heavy_calls: threading.Semaphore | None
    maintenance_store: Any
    lifespan: Lifespan | None


_VERIFIER = (
    "issuer",
    "max_lifetime_s",
    "leeway_s",
    "token_cache_size",
    "token_cache",
    "previous_keys",
    "clock",
)
_REGISTRATION = ("max_body_bytes", "max_json_containers")


def build_keyed_plane_app(
    spec: PlaneSpec[_S],
    store: _S,
    heimdall_key: bytes,
    consumer_id: str = DEFAULT_CONSUMER_ID,
    options: PlaneAppOptions | None = None,
) -> Starlette:
    """The standalone app of ``spec``'s plane (``POST /bifrost/handshake`` and the
    plane's call route) serving ``store``, its tokens verified with ``heimdall_key``
    for audience ``consumer_id``. The app does not close ``store``: whoever opened
    it does.

    Raises TypeError for a missing store, one that does not implement the plane's
    protocol (INV-008) or a key that is not bytes; ValueError for an empty key or a
    bad limit.
    """
    if store is None:
        raise TypeError(f"build_{spec.name}_provider_app requires a store (INV-008)")
    if not heimdall_key:
        raise ValueError("heimdall_key must be non-empty")
    given: dict[str, Any] = dict(options or {})
    verifier = JwtVerifier(
        heimdall_key,
        audience=consumer_id,
        **{k: given[k] for k in _VERIFIER if k in given},
    )
    registration = ConsumerRegistration(
        consumer_id=consumer_id,
        planes=(spec.name,),
        **{k: given[k] for k in _REGISTRATION if k in given},
    )
    return build_plane_app(
        spec,
        store,
        verifier,
        registration,
        given.get("maintenance_store"),
        given.get("hooks"),
        lifespan=given.get("lifespan"),
        body_budget=given.get("body_budget"),
        heavy_calls=given.get("heavy_calls"),
    )
