"""Per-tenant quotas in the conformance kit, for both planes (:mod:`bifrost.quota`).

A store made with ``make_store(quota=...)`` must refuse a write that takes a tenant
past its record count or its bytes with :class:`~bifrost.errors.QuotaExceeded`
naming the setting and never the tenant, and write nothing — records, history and
the idempotency ledger (the same call succeeds once a delete made room). Other
tenants and records without a tenant are not limited by it, a record replaced
within the quota is accepted, a record moved to another tenant counts there, and
deletes free their share at once.

Mixed into :class:`~bifrost.consumer.testing.conformance.MemoryStoreConformance` and
:class:`~bifrost.consumer.testing.conformance.AffectStoreConformance`.
"""

from __future__ import annotations

from typing import Any

import pytest

from bifrost.consumer.testing.conformance._helpers import (
    affect_snapshot,
    basis,
    chunk,
    ctx,
    memory_snapshot,
)
from bifrost.errors import QuotaExceeded
from bifrost.quota import affect_quota, memory_quota, record_size

__all__ = ["AffectQuotaTests", "MemoryQuotaTests"]

A = {"tenant": "tenant-secret-a"}
B = {"tenant": "tenant-secret-b"}
CTX_A = ctx(scope=A)
CTX_B = ctx(scope=B)
CTX_ALL = ctx()


def _refused(exc: pytest.ExceptionInfo[QuotaExceeded], wanted: str) -> None:
    """The refusal names the count and the setting, and no tenant."""
    text = f"{exc.value} {exc.value.details}"
    assert wanted in str(exc.value), str(exc.value)
    assert str(exc.value).startswith("tenant quota exceeded: ")
    assert "tenant-secret" not in text


def _mem(cid: str, scope: dict[str, str], pad: int = 0) -> dict[str, Any]:
    # Ids of one length and equal content: every record is the same number of bytes.
    return chunk(cid, basis(len(cid)), scope, content="x" * (100 + pad))


def _up(store: Any, records: list[dict[str, Any]], key: str, c: Any = CTX_A) -> Any:
    return store.upsert_many(records, idempotency_key=key, ctx=c)


class MemoryQuotaTests:
    """The quota of the memory plane (``make_store(quota=memory_quota(...))``)."""

    def test_quota_chunks_refuses_and_writes_nothing(self, make_store: Any) -> None:
        store = make_store(quota=memory_quota(3, 0))
        _up(store, [_mem("a1", A), _mem("a2", A), _mem("a3", A)], "k1")
        ids = ["a1", "a2", "a3", "a4", "b1"]
        before = memory_snapshot(store, ids)
        # A batch of two tenants: A's overflow refuses all of it, B's record included.
        with pytest.raises(QuotaExceeded) as exc:
            _up(store, [_mem("a4", A), _mem("b1", B)], "k2", CTX_ALL)
        _refused(exc, "4 chunks > RATATOSKR_MEMORY_QUOTA_CHUNKS 3")
        assert exc.value.wire_code("memory") == "memory.quota_exceeded"
        assert exc.value.status == 413
        assert memory_snapshot(store, ids) == before
        # Replacing a record at the limit is no growth; another tenant has its own quota.
        assert _up(store, [_mem("a1", A, pad=5)], "k3")["upserted"] == 1
        assert _up(store, [_mem("b1", B), _mem("b2", B), _mem("b3", B)], "k4", CTX_B) == {
            "upserted": 3,
            "replayed": False,
        }
        # Records without a tenant are not a tenant's: no quota limits them.
        assert _up(store, [_mem(f"n{i}", {}) for i in range(5)], "k5", CTX_ALL)["upserted"] == 5
        # The refused call recorded nothing: after a delete, the same call is performed.
        assert store.delete_many(["a2"])["deleted"] == 1
        assert _up(store, [_mem("a4", A), _mem("b1", B)], "k2", CTX_ALL) == {
            "upserted": 2,
            "replayed": False,
        }
        assert store.get("a4") is not None
        with pytest.raises(QuotaExceeded):
            _up(store, [_mem("a5", A)], "k6")

    def test_quota_bytes_refuses_and_deletes_free(self, make_store: Any) -> None:
        size = record_size(_mem("a1", A))
        store = make_store(quota=memory_quota(0, 2 * size + size // 2))
        _up(store, [_mem("a1", A), _mem("a2", A)], "k1")
        before = memory_snapshot(store, ["a1", "a2", "a3"])
        with pytest.raises(QuotaExceeded) as exc:
            _up(store, [_mem("a3", A)], "k2")
        _refused(exc, f"{3 * size} bytes > RATATOSKR_MEMORY_QUOTA_BYTES {2 * size + size // 2}")
        # A larger replacement past the quota is refused; one within it is accepted.
        with pytest.raises(QuotaExceeded):
            _up(store, [_mem("a1", A, pad=size)], "k3")
        assert memory_snapshot(store, ["a1", "a2", "a3"]) == before
        assert _up(store, [_mem("a1", A, pad=size // 4)], "k4")["upserted"] == 1
        assert store.get("a1")["revision"] == 2
        # B is unaffected by A being full.
        assert _up(store, [_mem("b1", B), _mem("b2", B)], "k5", CTX_B)["upserted"] == 2
        assert store.delete_many(["a1", "a2"])["deleted"] == 2
        assert _up(store, [_mem("a3", A), _mem("a4", A)], "k6")["upserted"] == 2

    def test_quota_follows_a_record_to_its_new_tenant(self, make_store: Any) -> None:
        store = make_store(quota=memory_quota(2, 0))
        _up(store, [_mem("a1", A), _mem("a2", A)], "k1")
        _up(store, [_mem("b1", B), _mem("b2", B)], "k2", CTX_B)
        # Moving a1 into a full tenant is refused; into a new one it frees A's share.
        with pytest.raises(QuotaExceeded):
            _up(store, [_mem("a1", B)], "k3", CTX_ALL)
        _up(store, [_mem("a1", {"tenant": "tenant-secret-c"})], "k4", CTX_ALL)
        assert _up(store, [_mem("a3", A)], "k5")["upserted"] == 1
        with pytest.raises(QuotaExceeded):
            _up(store, [_mem("a4", A)], "k6")


def _aff(key: str, scope: dict[str, str], pad: int = 0) -> dict[str, Any]:
    return {"key": key, "scope": dict(scope), "mood": "y" * (100 + pad)}


def _put(store: Any, records: list[dict[str, Any]], key: str, c: Any = CTX_A) -> Any:
    return store.put_many(records, idempotency_key=key, ctx=c)


class AffectQuotaTests:
    """The quota of the affect plane (``make_store(quota=affect_quota(...))``): keys,
    and the bytes of every revision a key keeps."""

    def test_quota_keys_refuses_and_writes_nothing(self, make_store: Any) -> None:
        store = make_store(quota=affect_quota(2, 0))
        _put(store, [_aff("a1", A), _aff("a2", A)], "k1")
        keys = ["a1", "a2", "a3", "b1"]
        before = affect_snapshot(store, keys)
        with pytest.raises(QuotaExceeded) as exc:
            _put(store, [_aff("b1", B), _aff("a3", A)], "k2", CTX_ALL)
        _refused(exc, "3 keys > RATATOSKR_AFFECT_QUOTA_KEYS 2")
        assert exc.value.wire_code("affect") == "affect.quota_exceeded"
        assert affect_snapshot(store, keys) == before
        # A new revision of a key is no new key; B and tenantless keys are not limited.
        assert _put(store, [_aff("a1", A)], "k3")["written"] == 1
        assert _put(store, [_aff("b1", B), _aff("b2", B)], "k4", CTX_B)["written"] == 2
        assert _put(store, [_aff(f"n{i}", {}) for i in range(4)], "k5", CTX_ALL)["written"] == 4
        assert store.delete_many(["a2"])["deleted"] == 1
        assert _put(store, [_aff("b1", B), _aff("a3", A)], "k2", CTX_ALL) == {
            "written": 2,
            "replayed": False,
        }

    def test_quota_bytes_count_every_revision(self, make_store: Any) -> None:
        size = record_size(_aff("a1", A))
        store = make_store(quota=affect_quota(0, 3 * size))
        for i in range(3):
            _put(store, [_aff("a1", A)], f"r{i}")
        before = affect_snapshot(store, ["a1", "a2"])
        # The history is what grows: a fourth revision of one key is past the quota.
        with pytest.raises(QuotaExceeded) as exc:
            _put(store, [_aff("a1", A)], "r3")
        _refused(exc, f"{4 * size} bytes > RATATOSKR_AFFECT_QUOTA_BYTES {3 * size}")
        with pytest.raises(QuotaExceeded):
            _put(store, [_aff("a2", A)], "r4")
        assert affect_snapshot(store, ["a1", "a2"]) == before
        assert _put(store, [_aff("b1", B)], "r5", CTX_B)["written"] == 1
        # Deleting the key frees its whole history.
        assert store.delete_many(["a1"])["deleted"] == 1
        assert _put(store, [_aff("a2", A)], "r4")["written"] == 1
        assert _put(store, [_aff("a2", A)], "r6")["written"] == 1
        assert _put(store, [_aff("a2", A)], "r7")["written"] == 1
        with pytest.raises(QuotaExceeded):
            _put(store, [_aff("a2", A)], "r8")

    def test_quota_moves_a_keys_history_with_it(self, make_store: Any) -> None:
        size = record_size(_aff("a1", A))
        store = make_store(quota=affect_quota(0, 3 * size))
        _put(store, [_aff("a1", A)], "r1")
        _put(store, [_aff("a1", A)], "r2")
        _put(store, [_aff("b1", B)], "r3", CTX_B)
        # a1's two revisions and its next one would take B to 4 records' bytes.
        with pytest.raises(QuotaExceeded):
            _put(store, [_aff("a1", B)], "r4", CTX_ALL)
        # To a new tenant they go (3), and A is empty again: three more fit there.
        _put(store, [_aff("a1", {"tenant": "tenant-secret-c"})], "r5", CTX_ALL)
        assert store.get("a1")["revision"] == 3
        _put(store, [_aff("a2", A), _aff("a3", A), _aff("a4", A)], "r6")
        with pytest.raises(QuotaExceeded):
            _put(store, [_aff("a5", A)], "r7")
