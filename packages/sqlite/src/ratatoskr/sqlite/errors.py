"""Typed storage errors shared by every plane.

SQLite's own exceptions carry file paths and sometimes SQL text; these carry a
short, content-free message so a plane can surface them without leaking data.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base class for storage failures a plane may want to map to a response."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SchemaMismatch(StorageError):
    """The file was created with settings that differ from the ones asked for now."""

    def __init__(self, setting: str, stored: str, requested: str) -> None:
        super().__init__(
            f"database was created with {setting}={stored}, but {setting}={requested} was requested"
        )
        self.setting = setting
        self.stored = stored
        self.requested = requested


class SchemaTooNew(StorageError):
    """The file holds migrations this code does not know (written by a newer release)."""


class ForeignDatabase(StorageError):
    """The file belongs to another plane (each plane has a file of its own)."""


class StorageFull(StorageError):
    """The disk (or the configured page limit) is full; the transaction was rolled back."""


class StorageReadOnly(StorageError):
    """The database file or its directory cannot be written."""


class StorageCorrupt(StorageError):
    """The file is not a SQLite database or its content is damaged."""


class StorageUnavailable(StorageError):
    """The file cannot be opened (missing directory, permissions) or stayed locked too long."""


class StorageInconsistent(StorageError):
    """A store found its own data breaking an invariant it keeps (two tables, or a
    table and an in-process index, that must agree do not): a bug or a file changed
    behind the store's back. Nothing was written; ``ratatoskr doctor`` checks the file.
    """
