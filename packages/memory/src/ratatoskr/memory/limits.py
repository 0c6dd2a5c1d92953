"""What a SQLite memory store is opened with, checked once when made."""

from __future__ import annotations

import dataclasses

from bifrost.limits import check_memory_limits, positive_limit
from bifrost.memory.options import retention_and_fields
from bifrost.memory.validation import DEFAULT_MAX_PAGE
from bifrost.quota import NO_QUOTA, Quota

__all__ = ["MemoryLimits"]


@dataclasses.dataclass(frozen=True)
class MemoryLimits:
    """What a memory store is opened with, checked once, when made: the plane's limits
    (bifrost's ``check_memory_limits``) and ``tombstone_retention`` must be positive
    integers (else InvalidLimits); see :func:`open_memory_store` for each."""

    embedding_dim: int
    max_batch: int
    max_top_k: int
    max_scope_any: int
    tombstone_retention: int
    max_page: int = DEFAULT_MAX_PAGE
    filterable_fields: tuple[str, ...] = ()
    quota: Quota = NO_QUOTA  # per tenant (bifrost.quota), kept in memory_quota
    retention_s: float | None = None  # ratatoskr.memory.retention; None: forever

    def __post_init__(self) -> None:
        check_memory_limits(
            embedding_dim=self.embedding_dim,
            max_batch=self.max_batch,
            max_top_k=self.max_top_k,
            max_scope_any=self.max_scope_any,
            max_page=self.max_page,
        )
        retention_s, fields = retention_and_fields(self.retention_s, self.filterable_fields)
        object.__setattr__(self, "retention_s", retention_s)
        object.__setattr__(self, "filterable_fields", fields)
        positive_limit("tombstone_retention", self.tombstone_retention)
