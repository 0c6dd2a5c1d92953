"""``forget`` on the SQLite memory store beyond the conformance kit: it finds the chunks
on the in-process index (no row outside the scope is read, chunks another process
wrote are found), and flushes the erasure once, at its end; a record spanning overflow
pages leaves no bytes."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

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


@pytest.mark.slow  # lasts over 1 s by design (longer than the background flush delay)
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


BIG = "SENTINEL-OVERFLOW-4c1e" * 600  # ~13 KB: the record spans overflow pages


def leaked(db_file: str, needle: bytes) -> list[str]:
    found = []
    for path in glob.glob(db_file + "*"):
        if os.path.isfile(path) and needle in Path(path).read_bytes():
            found.append(os.path.basename(path))
    return found


@pytest.mark.parametrize("route", ["delete_many", "forget"])
def test_an_erased_chunk_spanning_overflow_pages_leaves_no_bytes(
    db_file: str, ctx: DispatchContext, route: str
) -> None:
    # secure_delete=ON, not FAST: FAST leaves a freed overflow chain as it was (this
    # test fails with it: the content's bytes stay in memory.db after the checkpoint).
    s = open_memory_store(db_file, embedding_dim=DIM)
    fill(s, ctx, victims=0, others=30)
    s.upsert_many([chunk("big", 7, VICTIM, content=BIG)], idempotency_key="big", ctx=ctx)
    assert s.database.erasure.flush()  # the record's pages are in memory.db itself
    needle = b"SENTINEL-OVERFLOW-4c1e"
    assert "memory.db" in leaked(db_file, needle)
    if route == "delete_many":
        assert s.delete_many(["big"]) == {"deleted": 1}
        assert s.database.erasure.flush()
    else:
        assert s.forget({"end_user": "victim"}) == 1
    assert leaked(db_file, needle) == []
    assert s.count() == 30
    s.close()
    assert leaked(db_file, needle) == []
