"""``build_affect_plane_app``: this store behind bifrost's affect app.

The plane knows nothing of HTTP beyond this hand-over: bifrost owns the
routes, token checks, envelope parsing, scope grants and error rendering. The
builder is bifrost's :func:`~bifrost.consumer.keyed.build_keyed_plane_app` for
the affect plane: the signature every Bifrost plane's builder has (memory's
``build_memory_plane_app``), so the provider builds each the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Unpack

from bifrost.affect.protocol import AffectDataStore
from bifrost.consumer.keyed import PlaneAppOptions, build_keyed_plane_app
from bifrost.context import DEFAULT_CONSUMER_ID
from bifrost.planes import AFFECT_PLANE

if TYPE_CHECKING:  # starlette comes with bifrost; the plane never uses it directly
    from starlette.applications import Starlette

__all__ = ["build_affect_plane_app", "build_affect_provider_app"]


def build_affect_plane_app(
    store: AffectDataStore,
    heimdall_key: bytes,
    consumer_id: str = DEFAULT_CONSUMER_ID,
    **options: Unpack[PlaneAppOptions],
) -> Starlette:
    """The standalone affect app (``POST /bifrost/handshake``, ``POST /bifrost/affect-call``).

    The arguments mean what they mean for ``build_memory_plane_app``. The app does
    not close ``store``: whoever opened it does. Raises ValueError for an empty key
    or a bad limit, TypeError when ``heimdall_key`` is not bytes or ``store`` does
    not implement ``AffectDataStore``.
    """
    return build_keyed_plane_app(AFFECT_PLANE, store, heimdall_key, consumer_id, options)


# The name this builder had before every plane's builder took one signature.
build_affect_provider_app = build_affect_plane_app
