"""The per-tenant usage a quota is decided on (``affect_quota``): a file written
before it existed opens with the usage of the keys it holds — each key once, with
every revision it keeps, for the tenant of its newest — and the triggers keep it
equal through new revisions, tenant moves and deletes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from bifrost.context import DispatchContext
from bifrost.quota import affect_quota, record_size, tenant_of
from ratatoskr.affect import SqliteAffectStore, open_affect_store

from .test_schema import build_v1
from .v1_file import v1_view

CTX = DispatchContext(actor="agent-1")


def expected(store: SqliteAffectStore) -> dict[str, tuple[int, int]]:
    """Usage counted from what the store answers: every key's whole history."""
    items: Counter[str] = Counter()
    nbytes: Counter[str] = Counter()
    after = None
    while True:
        page = store.list(limit=100, after_key=after)
        for cur in page["items"]:
            tenant = tenant_of(cur["scope"])
            items[tenant] += 1
            revs = store.history(cur["key"], limit=500)["items"]
            nbytes[tenant] += sum(record_size(bare(r)) for r in revs)
        after = page["next_after_key"]
        if after is None:
            return {t: (items[t], nbytes[t]) for t in items}


def bare(view: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in view.items() if k not in ("revision", "recorded_at")}


def usage(store: SqliteAffectStore) -> dict[str, tuple[int, int]]:
    with store.database.read() as conn:
        return {
            str(t): (int(i), int(b))
            for t, i, b in conn.execute("SELECT tenant, items, bytes FROM affect_quota")
        }


def test_a_file_from_before_quotas_opens_with_its_usage(tmp_path: Path) -> None:
    path = str(tmp_path / "v1.db")
    build_v1(path)
    want = v1_view(path)
    store = open_affect_store(path, quota=affect_quota(10**6, 0))
    got = usage(store)
    assert got == expected(store)
    assert sum(i for i, _b in got.values()) == len(want["keys"]) and len(got) == 3

    keys = sorted(want["keys"])
    store.put_many(
        [{"key": k, "scope": {"tenant": "t9"}, "n": -1} for k in keys[:30]]
        + [{"key": f"new-{i}", "scope": {}, "n": i} for i in range(5)],
        idempotency_key="w1",
        ctx=CTX,
    )
    assert store.delete_many(keys[30:90])["deleted"] == 60
    assert usage(store) == expected(store)
    assert store.delete_many(keys[:30])["deleted"] == 30
    assert "t9" not in usage(store)
    store.close()
