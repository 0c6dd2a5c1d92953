"""The affect store protocol. Synchronous and grant-agnostic, like memory's."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from bifrost.context import DispatchContext

__all__ = ["AFFECT_CAPABILITIES", "AffectDataStore"]

AFFECT_CAPABILITIES: dict[str, Any] = {
    "history_supported": True,
    "optimistic_locking_supported": True,
    "transaction_supported": False,
    "filterable_metadata_fields": [],
}


@runtime_checkable
class AffectDataStore(Protocol):
    def describe_store(self) -> dict[str, Any]:
        """Exactly :data:`AFFECT_CAPABILITIES`."""
        ...

    def health(self) -> dict[str, Any]:
        """``{"status": "ok", "plane": "affect", "max_batch", "max_page"}``."""
        ...

    def put_many(
        self,
        records: list[dict[str, Any]],
        *,
        idempotency_key: str,
        ctx: DispatchContext,
        expected_revisions: dict[str, int] | None = None,
        idempotency_class: str | None = None,
    ) -> dict[str, Any]:
        """``{"written": N, "replayed": bool}``."""
        ...

    def get(self, key: str) -> dict[str, Any] | None: ...

    def get_many(self, keys: list[str]) -> list[dict[str, Any]]: ...

    def history(
        self, key: str, *, limit: int | None = None, before_revision: int | None = None
    ) -> dict[str, Any]:
        """``{"items": [newest first], "next_before_revision": int | None}``."""
        ...

    def delete_many(self, keys: list[str]) -> dict[str, Any]: ...

    def list(
        self,
        *,
        scope_all: dict[str, str] | None = None,
        scope_any: list[dict[str, str]] | None = None,
        limit: int | None = None,
        after_key: str | None = None,
    ) -> dict[str, Any]:
        """``{"items": [by key ascending], "next_after_key": str | None}``."""
        ...
