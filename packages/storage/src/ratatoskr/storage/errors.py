"""Typed storage errors, one hierarchy for every backend.

A driver's own exceptions carry file paths, hosts, SQL text and sometimes row
values; these carry a short, content-free message (and the backend adds at most
an error code), so a plane can surface them without leaking data. Each backend
translates its driver's exceptions into these and never chains the original.
"""

from __future__ import annotations

__all__ = [
    "CommitsBlocked",
    "ForeignDatabase",
    "SchemaMismatch",
    "SchemaTooNew",
    "StorageCorrupt",
    "StorageError",
    "StorageFull",
    "StorageInconsistent",
    "StorageReadOnly",
    "StorageUnavailable",
]


class StorageError(Exception):
    """Base class for storage failures a plane may want to map to a response."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SchemaMismatch(StorageError):
    """The database (a SQLite file, a PostgreSQL schema) was created with settings
    that differ from the ones asked for now."""

    def __init__(self, setting: str, stored: str, requested: str) -> None:
        super().__init__(
            f"database was created with {setting}={stored}, but {setting}={requested} was requested"
        )
        self.setting = setting
        self.stored = stored
        self.requested = requested


class SchemaTooNew(StorageError):
    """The database holds migrations this code does not know (a newer release wrote it)."""


class ForeignDatabase(StorageError):
    """The database belongs to another plane (each plane has a file or schema of its own)."""


class StorageFull(StorageError):
    """The disk (or a configured size limit, or the free space held back for deletes) is
    full; the transaction was rolled back."""

    # The Bifrost wire error this is (``bifrost.insufficient_storage``, 507), named by
    # its code so that storage does not import the wire library: its ``render_error``
    # honours it.
    bifrost_code = "insufficient_storage"


class StorageReadOnly(StorageError):
    """The database refuses writes: a read-only file or directory, a hot standby, a
    read-only transaction default."""


class StorageCorrupt(StorageError):
    """The database is not what it should be (not a SQLite file) or reports damaged
    data or indexes."""


class StorageUnavailable(StorageError):
    """The database cannot be reached or opened (missing directory, permissions, a
    server gone, out of connections, a refused role) or stayed locked too long.
    On the wire: ``bifrost.unavailable`` (503), to be retried."""

    bifrost_code = "unavailable"


class CommitsBlocked(StorageUnavailable):
    """PostgreSQL: commits wait for a synchronous standby that is not connected
    (``/readyz``'s reason); the message is content-free. Defined here, with the other
    storage errors, so that what catches it need not import the PostgreSQL driver
    (``ratatoskr.postgres.replication`` raises it and exports it)."""


class StorageInconsistent(StorageError):
    """A store found its own data breaking an invariant it keeps (two tables, or a
    table and an in-process index, that must agree do not): a bug or data changed
    behind the store's back. Nothing was written; ``ratatoskr doctor`` checks it.
    """
