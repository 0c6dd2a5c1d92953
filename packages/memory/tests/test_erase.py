"""``forget`` on the SQLite memory store beyond the conformance kit: it finds the chunks
on the in-process index (no row outside the scope is read, chunks another process
wrote are found), and flushes the erasure once, at its end."""

from __future__ import annotations

from bifrost.context import DispatchContext
from ratatoskr.memory import erase, open_memory_store

from .conftest import DIM, chunk

VICTIM = {"tenant": "t1", "end_user": "victim"}


def fill(store: object, ctx: DispatchContext, victims: int, others: int) -> None:
    rows = [chunk(f"v{i:03d}", i, VICTIM) for i in range(victims)]
    rows += [
        chunk(f"o{i:03d}", 1000 + i, {"tenant": "t1", "end_user": f"u{i % 3}"})
        for i in range(others)
    ]
    store.upsert_many(rows, idempotency_key="fill", ctx=ctx)  # type: ignore[attr-defined]


def test_forget_reads_no_row_outside_the_scope(db_file: str, ctx: DispatchContext) -> None:
    s = open_memory_store(db_file, embedding_dim=DIM)
    fill(s, ctx, victims=5, others=20)
    # Rows outside the scope are not read: one whose stored scope is not even an
    # object does not stop the forget (the old table walk parsed every row's scope).
    with s.database.write() as conn:
        conn.execute("UPDATE memory_chunks SET scope_json = '[]' WHERE chunk_id = 'o007'")
    assert s.forget({"end_user": "victim"}) == 5
    assert s.get_many([f"v{i:03d}" for i in range(5)]) == []
    assert len(s.get_many([f"o{i:03d}" for i in range(20) if i != 7])) == 19
    s.close()


def test_forget_finds_chunks_another_process_wrote(db_file: str, ctx: DispatchContext) -> None:
    a = open_memory_store(db_file, embedding_dim=DIM)
    fill(a, ctx, victims=3, others=4)
    b = open_memory_store(db_file, embedding_dim=DIM)  # its own index, as a second process
    b.upsert_many([chunk(f"w{i}", 50 + i, VICTIM) for i in range(4)], idempotency_key="b", ctx=ctx)
    assert a.forget({"end_user": "victim"}, dry_run=True) == 7
    assert a.forget({"end_user": "victim"}) == 7
    assert b.get_many([f"w{i}" for i in range(4)] + ["v000"]) == []
    assert b.count() == a.count() == 4
    b.close()
    a.close()


def test_forget_flushes_once_at_its_end(db_file: str, ctx: DispatchContext) -> None:
    s = open_memory_store(db_file, embedding_dim=DIM)
    fill(s, ctx, victims=12, others=4)
    rewrites: list[bool] = []
    rewrite = s.database.erasure.before
    assert rewrite is not None

    def counted() -> None:
        rewrites.append(s.database.erasure.pending)
        rewrite()

    s.database.erasure.before = counted
    # Batches of one, 0.15 s apart: the forget lasts longer than the background flush's
    # delay after an erasure (1 s), which must not rewrite the sidecar meanwhile.
    assert erase.forget(s, {"end_user": "victim"}, batch=1, pause_s=0.15) == 12
    assert len(rewrites) == 1
    assert not s.database.erasure.pending
    s.close()
