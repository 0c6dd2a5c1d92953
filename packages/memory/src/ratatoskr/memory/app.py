"""``build_memory_provider_app``: this plane's store behind bifrost's memory app.

The plane knows nothing of HTTP beyond this hand-over: bifrost owns the routes,
token checks, envelope parsing, scope grants and error rendering. The builder is
bifrost's :func:`~bifrost.consumer.keyed.build_keyed_plane_app` for the memory
plane, with the signature every Bifrost plane's builder has
(``build_memory_provider_app(store, heimdall_key, consumer_id="ratatoskr",
**options)``, the options being :class:`~bifrost.consumer.keyed.PlaneAppOptions`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Unpack

from bifrost.consumer.keyed import PlaneAppOptions, build_keyed_plane_app
from bifrost.context import DEFAULT_CONSUMER_ID
from bifrost.memory.protocol import MemoryDataStore
from bifrost.planes import MEMORY_PLANE

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["build_memory_provider_app"]


def build_memory_provider_app(
    store: MemoryDataStore,
    heimdall_key: bytes,
    consumer_id: str = DEFAULT_CONSUMER_ID,
    **options: Unpack[PlaneAppOptions],
) -> Starlette:
    """The standalone memory app (``POST /bifrost/handshake``, ``POST
    /bifrost/memory-call``) serving ``store``, its tokens verified with
    ``heimdall_key`` (HS256) for audience ``consumer_id``. The app does not close the
    store: whoever opened it does.

    Raises TypeError for a missing store or one that does not implement
    ``MemoryDataStore`` (INV-008), or a key that is not bytes; ValueError for an
    empty key or a bad limit.
    """
    return build_keyed_plane_app(MEMORY_PLANE, store, heimdall_key, consumer_id, options)
