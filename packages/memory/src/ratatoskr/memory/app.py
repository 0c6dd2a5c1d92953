"""``build_memory_plane_app``: this plane's store behind bifrost's memory app.

The plane knows nothing of HTTP beyond this hand-over: bifrost owns the routes,
token checks, envelope parsing, scope grants and error rendering. The builder is
bifrost's :func:`~bifrost.consumer.keyed.build_keyed_plane_app` with the memory
plane filled in, so it has the signature every Bifrost plane's builder has
(``build_memory_plane_app(store, heimdall_key, consumer_id="ratatoskr",
**options)``, the options being :class:`~bifrost.consumer.keyed.PlaneAppOptions`)
and the provider builds each plane the same way. Tokens are verified with
``heimdall_key`` (HS256) for audience ``consumer_id``; the app does not close the
store: whoever opened it does.

Raises TypeError for a missing store or one that does not implement
``MemoryDataStore`` (INV-008), or a key that is not bytes; ValueError for an
empty key or a bad limit.
"""

from __future__ import annotations

from bifrost.consumer.keyed import PlaneAppBuilder, plane_app_builder
from bifrost.memory.protocol import MemoryDataStore
from bifrost.planes import MEMORY_PLANE

__all__ = ["build_memory_plane_app", "build_memory_provider_app"]

build_memory_plane_app: PlaneAppBuilder[MemoryDataStore] = plane_app_builder(MEMORY_PLANE)

# The name this builder had before every plane's builder took one signature.
build_memory_provider_app = build_memory_plane_app
