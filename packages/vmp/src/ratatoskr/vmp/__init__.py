"""Ratatoskr's VMP plane: the Valori Memory Protocol v0 over SQLite.

Deterministic vector memory: Q16.16 fixed-point vectors, exact integer
squared-L2 search, document/chunk graph nodes, metadata, byte-identical
snapshots and a logical state hash. ``open_vmp_store`` gives the store,
``build_vmp_app`` the Starlette app, ``ratatoskr.vmp.client.VmpClient`` a client.
"""

from ratatoskr.vmp.app import build_vmp_app
from ratatoskr.vmp.auth import is_loopback_host
from ratatoskr.vmp.errors import (
    CapacityExceeded,
    DimMismatch,
    InternalError,
    InvalidArgument,
    NotFound,
    PayloadTooLarge,
    Unauthenticated,
    Unavailable,
    UnsupportedMediaType,
    VmpError,
)
from ratatoskr.vmp.snapshot import snapshot_size_limit
from ratatoskr.vmp.store import (
    DEFAULT_DIM,
    DEFAULT_MAX_RECORDS,
    MAX_K,
    SearchHit,
    UpsertResult,
    VmpStore,
    open_vmp_store,
)

__all__ = [
    "DEFAULT_DIM",
    "DEFAULT_MAX_RECORDS",
    "MAX_K",
    "CapacityExceeded",
    "DimMismatch",
    "InternalError",
    "InvalidArgument",
    "NotFound",
    "PayloadTooLarge",
    "SearchHit",
    "Unauthenticated",
    "Unavailable",
    "UnsupportedMediaType",
    "UpsertResult",
    "VmpError",
    "VmpStore",
    "build_vmp_app",
    "is_loopback_host",
    "open_vmp_store",
    "snapshot_size_limit",
]
