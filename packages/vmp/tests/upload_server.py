"""The VMP app that test_upload_http.py serves over real HTTP on a free loopback port,
through :func:`ratatoskr.provider.testing.start_app` (``upload_server.py:build DB CAP``).

``CAP`` is the snapshot cap in bytes, or ``default`` for the cap derived from the
store; the app takes no key (the loopback default).
"""

from __future__ import annotations

from starlette.applications import Starlette

from ratatoskr.vmp import build_vmp_app, open_vmp_store

DIM = 16


def build(db: str, cap: str) -> Starlette:
    store = open_vmp_store(db, dim=DIM)
    return build_vmp_app(
        store,
        api_key=None,
        allow_no_key=True,
        max_snapshot_bytes=None if cap == "default" else int(cap),
    )
