"""The per-tenant usage a quota is decided on (``memory_quota``): a file written
before it existed opens with the usage of the chunks it holds (migration 4), and the
triggers keep it equal to the chunks' through writes, replacements, tenant moves and
deletes; a tenant whose last chunk goes leaves no row."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bifrost.context import DispatchContext
from bifrost.quota import memory_quota, record_size, tenant_of
from ratatoskr.memory import RatatoskrMemoryStore, open_memory_store

from .conftest import DIM
from .test_schema import v1_records
from .v1_file import write_v1_file

CTX = DispatchContext(actor="agent-1")


def expected(recs: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    items: Counter[str] = Counter()
    nbytes: Counter[str] = Counter()
    for rec in recs:
        tenant = tenant_of(rec["scope"])
        items[tenant] += 1
        nbytes[tenant] += record_size(rec)
    return {t: (items[t], nbytes[t]) for t in items}


def usage(store: RatatoskrMemoryStore) -> dict[str, tuple[int, int]]:
    with store.database.read() as conn:
        return {
            str(t): (int(i), int(b))
            for t, i, b in conn.execute("SELECT tenant, items, bytes FROM memory_quota")
        }


@pytest.mark.slow
def test_a_file_from_before_quotas_opens_with_its_usage(tmp_path: Path) -> None:
    path = str(tmp_path / "v1.db")
    recs = [
        {**r, "scope": {"tenant": f"t{i % 3}"} if i % 4 else {}} for i, r in enumerate(v1_records())
    ]
    write_v1_file(path, recs, dim=DIM)
    store = open_memory_store(path, embedding_dim=DIM, quota=memory_quota(10**6, 0))
    want = expected(recs)
    assert len(want) == 4 and usage(store) == want

    # Replacements (larger, and moved to another tenant), new chunks and deletes.
    by_id = {r["id"]: r for r in recs}
    moved = [{**by_id[r["id"]], "scope": {"tenant": "t9"}, "pad": "p" * 500} for r in recs[:40]]
    fresh = [{**recs[-1], "id": f"new-{i}", "scope": {"tenant": "t0"}} for i in range(30)]
    store.upsert_many(moved + fresh, idempotency_key="w1", ctx=CTX)
    gone = [r["id"] for r in recs[40:400]] + ["new-0"]
    assert store.delete_many(gone)["deleted"] == len(gone)
    by_id.update({r["id"]: r for r in moved + fresh})
    for cid in gone:
        del by_id[cid]
    assert usage(store) == expected(list(by_id.values()))

    # A tenant whose last chunk is deleted leaves nothing behind.
    assert store.delete_many([r["id"] for r in moved])["deleted"] == 40
    assert "t9" not in usage(store)
    store.close()
