"""The affect store on bifrost's write path: one conflict message, the clock read
inside the write transaction, the ledger pruned by the writes."""

from __future__ import annotations

import pytest

from bifrost.context import DispatchContext
from bifrost.errors import IdempotencyConflict
from bifrost.writes import CONFLICT_MESSAGE
from ratatoskr.affect import SqliteAffectStore, open_affect_store

from .conftest import rec

CTX = DispatchContext(actor="agent-1")


def ledger_size(store: SqliteAffectStore) -> int:
    with store.database.read() as conn:
        return int(conn.execute("SELECT count(*) FROM affect_idempotency").fetchall()[0][0])  # type: ignore[arg-type]


def test_the_conflict_message_is_the_write_paths() -> None:
    store = open_affect_store(":memory:")
    store.put_many([rec("a")], idempotency_key="k", ctx=CTX)
    with pytest.raises(IdempotencyConflict) as caught:
        store.put_many([rec("b")], idempotency_key="k", ctx=CTX)
    assert caught.value.message == CONFLICT_MESSAGE
    assert store.get("b") is None
    store.close()


def test_the_clock_is_read_inside_the_write_transaction() -> None:
    seen: list[bool] = []
    holder: list[SqliteAffectStore] = []

    def clock() -> float:
        if holder:
            seen.append(holder[0].database._lock.locked())
        return 1000.0

    store = open_affect_store(":memory:", clock=clock)
    holder.append(store)
    store.put_many([rec("a")], idempotency_key="k", ctx=CTX)
    store.put_many([rec("a")], idempotency_key="k", ctx=CTX)  # a replay
    assert seen == [True, True]
    store.close()


def test_writes_prune_expired_ledger_entries() -> None:
    now = [0.0]
    store = open_affect_store(":memory:", clock=lambda: now[0])
    for i in range(10):
        store.put_many([rec("a")], idempotency_key=f"k{i}", ctx=CTX, idempotency_class="ephemeral")
    assert ledger_size(store) == 10
    now[0] = 3600.0
    store.put_many([rec("a")], idempotency_key="later", ctx=CTX)
    assert ledger_size(store) == 1
    store.close()
