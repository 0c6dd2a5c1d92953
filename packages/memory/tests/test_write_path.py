"""The memory store on bifrost's write path: one conflict message, the clock read
inside the write transaction, the ledger pruned by the writes."""

from __future__ import annotations

import pytest

from bifrost.context import DispatchContext
from bifrost.errors import IdempotencyConflict
from bifrost.writes import CONFLICT_MESSAGE
from ratatoskr.memory import SqliteMemoryStore, open_memory_store

from .conftest import DIM, chunk

CTX = DispatchContext(actor="agent-1")


def ledger_size(store: SqliteMemoryStore) -> int:
    with store.database.read() as conn:
        return int(conn.execute("SELECT count(*) FROM memory_idempotency").fetchall()[0][0])  # type: ignore[arg-type]


def test_the_conflict_message_is_the_write_paths() -> None:
    store = open_memory_store(":memory:", embedding_dim=DIM)
    store.upsert_many([chunk("a", 1)], idempotency_key="k", ctx=CTX)
    with pytest.raises(IdempotencyConflict) as caught:
        store.upsert_many([chunk("b", 2)], idempotency_key="k", ctx=CTX)
    assert caught.value.message == CONFLICT_MESSAGE
    assert store.count() == 1
    store.close()


def test_the_clock_is_read_inside_the_write_transaction() -> None:
    seen: list[bool] = []
    holder: list[SqliteMemoryStore] = []

    def clock() -> float:
        if holder:  # not while opening
            seen.append(holder[0].database._lock.locked())
        return 1000.0

    store = open_memory_store(":memory:", embedding_dim=DIM, clock=clock)
    holder.append(store)
    store.upsert_many([chunk("a", 1)], idempotency_key="k", ctx=CTX)
    store.upsert_many([chunk("a", 1)], idempotency_key="k", ctx=CTX)  # a replay
    assert seen == [True, True]
    store.close()


def test_writes_prune_expired_ledger_entries() -> None:
    now = [0.0]
    store = open_memory_store(":memory:", embedding_dim=DIM, clock=lambda: now[0])
    for i in range(10):
        store.upsert_many(
            [chunk("a", 1)], idempotency_key=f"k{i}", ctx=CTX, idempotency_class="ephemeral"
        )
    assert ledger_size(store) == 10
    now[0] = 3600.0
    store.upsert_many([chunk("a", 1)], idempotency_key="later", ctx=CTX)
    assert ledger_size(store) == 1
    store.close()
