"""``build_affect_provider_app``: this plane's store behind bifrost's affect app.

bifrost's :func:`~bifrost.consumer.keyed.build_keyed_plane_app` for the affect
plane: the one signature of every Bifrost plane's builder (see
``ratatoskr.memory.app``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Unpack

from bifrost.affect.protocol import AffectDataStore
from bifrost.consumer.keyed import PlaneAppOptions, build_keyed_plane_app
from bifrost.context import DEFAULT_CONSUMER_ID
from bifrost.planes import AFFECT_PLANE

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["build_affect_provider_app"]


def build_affect_provider_app(
    store: AffectDataStore,
    heimdall_key: bytes,
    consumer_id: str = DEFAULT_CONSUMER_ID,
    **options: Unpack[PlaneAppOptions],
) -> Starlette:
    """The standalone affect app (``POST /bifrost/handshake``, ``POST
    /bifrost/affect-call``) serving ``store``, its tokens verified with
    ``heimdall_key`` (HS256) for audience ``consumer_id``. The app does not close the
    store: whoever opened it does.

    Raises ValueError for an empty key or a bad limit, TypeError when
    ``heimdall_key`` is not bytes or the store does not implement ``AffectDataStore``.
    """
    return build_keyed_plane_app(AFFECT_PLANE, store, heimdall_key, consumer_id, options)
