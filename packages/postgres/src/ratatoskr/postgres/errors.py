"""Typed storage errors of the PostgreSQL backend, and the mapping from the driver's.

The classes are the one hierarchy every backend raises
(``ratatoskr.storage.errors``; ``ratatoskr.postgres`` re-exports them), so a
plane or the provider handles both backends alike, by one class.

psycopg's exceptions carry the server's message, which can quote a row
("Key (chunk_id)=(…) already exists"), the host and user of the DSN, or SQL
text. These carry a short, content-free message and at most the SQLSTATE code;
the driver's exception is never chained into them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
import psycopg_pool

from ratatoskr.storage.errors import (
    StorageCorrupt,
    StorageError,
    StorageFull,
    StorageReadOnly,
    StorageUnavailable,
)

__all__ = ["translate", "translate_errors"]


# SQLSTATE → (class, message). Classes of codes are matched by their first two
# characters after the exact codes.
_EXACT: dict[str, tuple[type[StorageError], str]] = {
    "53100": (StorageFull, "the database server's disk is full"),
    "25006": (StorageReadOnly, "the database server refuses writes (read-only)"),
    "XX001": (StorageCorrupt, "the database server reports corrupted data"),
    "XX002": (StorageCorrupt, "the database server reports a corrupted index"),
    "57P01": (StorageUnavailable, "the database server is shutting down"),
    "57P02": (StorageUnavailable, "the database server is shutting down"),
    "57P03": (StorageUnavailable, "the database server is not accepting connections yet"),
    "57014": (StorageUnavailable, "the statement was cancelled (timeout)"),
    # A write's lock_timeout (ratatoskr.postgres.database): the holder may be a write
    # waiting for the synchronous standby.
    "55P03": (StorageUnavailable, "a write waited too long for a lock another write holds; retry"),
    "40001": (StorageUnavailable, "a concurrent transaction conflicted; retry"),
    "40P01": (StorageUnavailable, "a concurrent transaction deadlocked; retry"),
    "3D000": (StorageUnavailable, "the database does not exist"),
    "42501": (StorageUnavailable, "the database role lacks a privilege this store needs"),
}
_CLASSES: dict[str, tuple[type[StorageError], str]] = {
    "08": (StorageUnavailable, "the database server cannot be reached"),
    "28": (StorageUnavailable, "the database server refused the credentials"),
    "53": (StorageUnavailable, "the database server is out of resources (connections, memory)"),
    "58": (StorageUnavailable, "the database server reports a system error"),
}


def translate(exc: BaseException) -> StorageError:
    """The typed, content-free error for a driver or pool exception."""
    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return StorageUnavailable("no database connection became free in time")
    if isinstance(exc, psycopg_pool.PoolClosed):
        return StorageUnavailable("the store is closed")
    sqlstate = getattr(exc, "sqlstate", None)
    if isinstance(sqlstate, str):
        hit = _EXACT.get(sqlstate) or _CLASSES.get(sqlstate[:2])
        if hit is not None:
            cls, message = hit
            return cls(f"{message} (SQLSTATE {sqlstate})")
        return StorageError(f"unexpected database error (SQLSTATE {sqlstate})")
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        # No SQLSTATE: the connection failed or broke before the server could answer.
        return StorageUnavailable("the database server cannot be reached")
    return StorageError(f"unexpected database error ({type(exc).__name__})")


@contextlib.contextmanager
def translate_errors() -> Iterator[None]:
    """Re-raise driver and pool exceptions as :class:`StorageError` subclasses."""
    try:
        yield
    except (psycopg.Error, psycopg_pool.PoolTimeout, psycopg_pool.PoolClosed) as exc:
        raise translate(exc) from None
