"""Per-tenant quotas: how many records and how many bytes one ``tenant`` may keep.

Every store of every plane keeps, per tenant value, its **usage**: the records it
holds (memory chunks, affect keys) and their **bytes** — the UTF-8 length of each
record's canonical JSON as written (:func:`bifrost.records.canonical_record`: what
``get`` hands back without ``revision``; a memory chunk's embedding included), and
for an affect key the sum over every revision it keeps (its history is what grows
without bound). The usage is kept by the store as it writes and deletes, not counted
at each write.

A write is decided once, here (:func:`check_quota`), inside its transaction, after
its rows are written: the store reads the usage of the tenants of the batch as the
write left it (on PostgreSQL, rows the write itself locked, so concurrent writers to
one tenant take turns) and a tenant past its quota raises
:class:`~bifrost.errors.QuotaExceeded` — the transaction rolls back, idempotency
ledger included, and nothing is written. A write that leaves a tenant at or below
its quota goes through, so replacing a record with one no larger always does, and
deletes free their records' share at once.

Records without a tenant are counted in one bucket (:data:`NO_TENANT`) that no quota
limits: only a token whose grant names no tenant can write them (a grant that names
one admits only records of that tenant), which is the deployment's own, not a
tenant's. A limit of 0 means no limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from bifrost.errors import QuotaExceeded
from bifrost.jsoncodec import canonical_json

__all__ = [
    "DEFAULT_AFFECT_QUOTA_KEYS",
    "DEFAULT_MEMORY_QUOTA_CHUNKS",
    "DEFAULT_QUOTA_BYTES",
    "NO_QUOTA",
    "NO_TENANT",
    "Quota",
    "TenantUsage",
    "Usage",
    "affect_quota",
    "batch_tenants",
    "check_quota",
    "memory_quota",
    "record_size",
    "tenant_of",
]

DEFAULT_MEMORY_QUOTA_CHUNKS = 1_000_000
DEFAULT_AFFECT_QUOTA_KEYS = 1_000_000
DEFAULT_QUOTA_BYTES = 4 * 1024**3

NO_TENANT = ""
"""The bucket of records whose scope has no ``tenant`` (scope values are non-empty,
so no tenant is named so)."""


class Usage(NamedTuple):
    """What one tenant holds: records and their bytes."""

    items: int
    bytes: int


@dataclass(frozen=True)
class Quota:
    """The per-tenant limits of one plane (0: no limit) and the names a refusal uses:
    ``noun`` for the records (``chunks``, ``keys``), the settings that set them."""

    items: int = 0
    bytes: int = 0
    noun: str = "records"
    items_setting: str = "items quota"
    bytes_setting: str = "bytes quota"

    def __post_init__(self) -> None:
        for name in ("items", "bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"quota {name} must be an integer >= 0 (0: no limit)")

    @property
    def enabled(self) -> bool:
        """Whether any limit applies (else a store need not read the usage)."""
        return bool(self.items or self.bytes)


NO_QUOTA = Quota()


def memory_quota(chunks: int, nbytes: int) -> Quota:
    """The memory plane's quota (``RATATOSKR_MEMORY_QUOTA_CHUNKS`` / ``_BYTES``)."""
    return Quota(
        chunks, nbytes, "chunks", "RATATOSKR_MEMORY_QUOTA_CHUNKS", "RATATOSKR_MEMORY_QUOTA_BYTES"
    )


def affect_quota(keys: int, nbytes: int) -> Quota:
    """The affect plane's quota (``RATATOSKR_AFFECT_QUOTA_KEYS`` / ``_BYTES``)."""
    return Quota(
        keys, nbytes, "keys", "RATATOSKR_AFFECT_QUOTA_KEYS", "RATATOSKR_AFFECT_QUOTA_BYTES"
    )


def tenant_of(scope: Mapping[str, Any]) -> str:
    """The usage bucket of a record of ``scope``: its tenant, or :data:`NO_TENANT`."""
    tenant = scope.get("tenant")
    return tenant if isinstance(tenant, str) else NO_TENANT


class _Scoped(Protocol):
    @property
    def scope(self) -> Mapping[str, str]: ...


def batch_tenants(items: Iterable[_Scoped]) -> list[str]:
    """The tenants a write's items belong to, sorted (the order a store reads, and on
    PostgreSQL locks, their usage in); the unlimited :data:`NO_TENANT` left out."""
    return sorted({t for t in (tenant_of(it.scope) for it in items) if t != NO_TENANT})


def record_size(record: Mapping[str, Any]) -> int:
    """The bytes a record counts for: the length of its canonical JSON."""
    return len(canonical_json(dict(record)))


def check_quota(usage: Mapping[str, tuple[int, int]], quota: Quota) -> None:
    """The one quota decision, inside the write's transaction: ``usage`` is each
    tenant of the batch as the write leaves it (``(items, bytes)``, a :class:`Usage`).
    Tenants are looked at in sorted order; :data:`NO_TENANT` is never limited.

    Raises QuotaExceeded naming the count, the setting and its value (never the tenant).
    """
    for tenant in sorted(usage):
        if tenant == NO_TENANT:
            continue
        items, nbytes = usage[tenant]
        if quota.items and items > quota.items:
            raise QuotaExceeded(
                f"tenant quota exceeded: {items} {quota.noun} > {quota.items_setting}"
                f" {quota.items}",
                {"setting": quota.items_setting, "limit": quota.items, "usage": items},
            )
        if quota.bytes and nbytes > quota.bytes:
            raise QuotaExceeded(
                f"tenant quota exceeded: {nbytes} bytes > {quota.bytes_setting} {quota.bytes}",
                {"setting": quota.bytes_setting, "limit": quota.bytes, "usage": nbytes},
            )


class TenantUsage:
    """Usage by tenant in a dict, for stores that keep their records in memory (the
    reference stores), under the store's lock: :meth:`after` is what a change would
    leave, :meth:`apply` makes it so. Empty tenants are dropped (a forgotten tenant
    leaves no trace)."""

    def __init__(self) -> None:
        self._usage: dict[str, Usage] = {}

    def get(self, tenant: str) -> Usage:
        return self._usage.get(tenant, Usage(0, 0))

    def after(self, changes: Iterable[tuple[str, int, int]]) -> dict[str, Usage]:
        """The usage of each tenant ``changes`` (``(tenant, items, bytes)`` deltas) touch,
        once they are applied."""
        out: dict[str, Usage] = {}
        for tenant, items, nbytes in changes:
            held = out.get(tenant) or self.get(tenant)
            out[tenant] = Usage(held.items + items, held.bytes + nbytes)
        return out

    def apply(self, usage: Mapping[str, Usage]) -> None:
        """Make ``usage`` (from :meth:`after`) the usage of its tenants."""
        for tenant, held in usage.items():
            if held.items or held.bytes:
                self._usage[tenant] = held
            else:
                self._usage.pop(tenant, None)
