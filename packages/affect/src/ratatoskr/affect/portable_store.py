"""``export_page`` and ``import_keys`` of a durable affect store, once for both
backends: each is its backend's portability module (:mod:`ratatoskr.affect.portability`,
:mod:`ratatoskr.affect.postgres.portability`) run on the store's database."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

from bifrost.portability import ExportedKey, ImportedKeys, ImportOutcome, OnConflict

__all__ = ["KeyPortability", "PortableKeys"]


class KeyPortability(Protocol):
    """What a backend's portability module provides (the module itself satisfies it)."""

    def export_page(
        self, db: Any, after_key: str | None, limit: int, scope_all: Mapping[str, str], /
    ) -> tuple[list[ExportedKey], str | None]: ...

    def import_keys(
        self,
        db: Any,
        batch: ImportedKeys,
        on_conflict: OnConflict,
        /,
        *,
        allow_scope_change: bool = False,
    ) -> ImportOutcome: ...


class _Store(Protocol):
    transfer: ClassVar[KeyPortability]

    @property
    def database(self) -> Any: ...


class PortableKeys:
    """The base of a durable affect store: ``transfer`` names its backend's portability
    module, run on the store's ``database``."""

    def export_page(
        self: _Store, after_key: str | None, limit: int, scope_all: Mapping[str, str]
    ) -> tuple[list[ExportedKey], str | None]:
        """A keyset page for ``ratatoskr export``: up to ``limit`` keys after
        ``after_key`` whose current scope contains ``scope_all``, each with its whole
        history, and the cursor of the next page (None: the last)."""
        return self.transfer.export_page(self.database, after_key, limit, scope_all)

    def import_keys(
        self: _Store,
        batch: ImportedKeys,
        on_conflict: OnConflict,
        *,
        allow_scope_change: bool = False,
    ) -> ImportOutcome:
        """One ``ratatoskr import`` batch, in one transaction of the store. Raises
        ImportConflict, ImportScopeChange (nothing written), StorageError subclasses."""
        return self.transfer.import_keys(
            self.database, batch, on_conflict, allow_scope_change=allow_scope_change
        )
