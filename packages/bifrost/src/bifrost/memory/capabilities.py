"""The memory store's capability descriptor (INV-006: advertise ⇒ implement)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["GATED_VERB_CAPABILITY", "StoreCapabilities"]


@dataclass(frozen=True)
class StoreCapabilities:
    """What a memory store implements. The defaults are the v1 basic plane."""

    relational_edges_supported: bool = False
    optimistic_locking_supported: bool = True
    atomic_supersede_supported: bool = False
    transaction_supported: bool = False
    filterable_metadata_fields: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Exactly the five v1 keys (``describe_store``'s result)."""
        return {
            "relational_edges_supported": self.relational_edges_supported,
            "optimistic_locking_supported": self.optimistic_locking_supported,
            "atomic_supersede_supported": self.atomic_supersede_supported,
            "transaction_supported": self.transaction_supported,
            "filterable_metadata_fields": list(self.filterable_metadata_fields),
        }


# Gated verbs and the capability that would advertise them (None: no v1 flag).
GATED_VERB_CAPABILITY: dict[str, str | None] = {
    "upsert_edges": "relational_edges_supported",
    "get_edges_for": "relational_edges_supported",
    "atomic_supersede": "atomic_supersede_supported",
    "mark_invalid": None,
    "mark_superseded": None,
    "patch_many": None,
    "acquire_lease": None,
    "renew_lease": None,
    "release_lease": None,
    "get_checkpoint": None,
    "put_checkpoint": None,
}
