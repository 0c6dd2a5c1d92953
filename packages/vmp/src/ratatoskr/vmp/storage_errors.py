"""Storage failures raised as VMP errors: a full disk is CAPACITY_EXCEEDED, any other
INTERNAL_ERROR (the storage layer's messages are content-free already)."""

from __future__ import annotations

from types import TracebackType

from ratatoskr.sqlite import StorageError, StorageFull
from ratatoskr.vmp.errors import CapacityExceeded, InternalError, VmpError


class StorageErrors:
    """The translation, as a context manager.

    A class rather than a ``@contextmanager`` generator: every search enters it, and
    this costs a fraction of a generator's set-up.
    """

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None or isinstance(exc, VmpError):
            return
        if isinstance(exc, StorageFull):
            raise CapacityExceeded("storage is full") from exc
        if isinstance(exc, StorageError):
            raise InternalError(f"storage error: {exc.message}") from exc


_STORAGE_ERRORS = StorageErrors()


def storage_errors() -> StorageErrors:
    """``with storage_errors(): …`` raises storage failures as VMP errors."""
    return _STORAGE_ERRORS
