"""SyncedIndex beyond the store's own tests: an erasure's sidecar rewrite writes the
file while searches go on, and leaves a file without the erased chunks."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from bifrost.context import DispatchContext
from ratatoskr.memory import open_memory_store, sidecar

from .conftest import DIM, chunk, vec


def test_searches_go_on_while_the_sidecar_is_rewritten(
    db_file: str, ctx: DispatchContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = open_memory_store(db_file, embedding_dim=DIM)
    s.upsert_many(
        [chunk(f"c{i}", i, {"tenant": "t"}) for i in range(20)], idempotency_key="k", ctx=ctx
    )
    s.delete_many(["c0", "c1"])
    writing, release = threading.Event(), threading.Event()
    real_write = sidecar.write

    def slow_write(path: str, image: sidecar.Image, *, lineage: str) -> None:
        writing.set()
        assert release.wait(10)
        real_write(path, image, lineage=lineage)

    monkeypatch.setattr(sidecar, "write", slow_write)
    flushed: list[Any] = []
    flusher = threading.Thread(target=lambda: flushed.append(s.database.erasure.flush()))
    flusher.start()
    try:
        assert writing.wait(10)
        # The file is being written: a search still answers (it waited for the whole
        # write when the rewrite kept the index to itself).
        found: list[Any] = []
        searcher = threading.Thread(
            target=lambda: found.append(s.search(vec(5), top_k=3, scope_all={"tenant": "t"}))
        )
        searcher.start()
        searcher.join(5)
        assert not searcher.is_alive()
        assert len(found[0]) == 3
    finally:
        release.set()
        flusher.join(10)
    assert flushed == [True]
    path = db_file + sidecar.SUFFIX
    with s.database.read() as conn:
        image = sidecar.read(path, DIM, lineage=sidecar.lineage(conn))
    assert image is not None
    assert sorted(image.ids) == sorted(f"c{i}" for i in range(2, 20))
    s.close()
