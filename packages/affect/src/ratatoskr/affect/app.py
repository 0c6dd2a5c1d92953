"""``build_affect_plane_app``: this plane's store behind bifrost's affect app.

bifrost's :func:`~bifrost.consumer.keyed.build_keyed_plane_app` with the affect
plane filled in: the one signature of every Bifrost plane's builder (see
``ratatoskr.memory.app``), so the provider builds each plane the same way. The
app does not close the store: whoever opened it does.

Raises ValueError for an empty key or a bad limit, TypeError when
``heimdall_key`` is not bytes or the store does not implement ``AffectDataStore``.
"""

from __future__ import annotations

from bifrost.affect.protocol import AffectDataStore
from bifrost.consumer.keyed import PlaneAppBuilder, plane_app_builder
from bifrost.planes import AFFECT_PLANE

__all__ = ["build_affect_plane_app", "build_affect_provider_app"]

build_affect_plane_app: PlaneAppBuilder[AffectDataStore] = plane_app_builder(AFFECT_PLANE)

# The name this builder had before every plane's builder took one signature.
build_affect_provider_app = build_affect_plane_app
