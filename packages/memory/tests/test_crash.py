"""Durability: SIGKILL a writer mid-stream; nothing acknowledged is lost, nothing is partial."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from bifrost.context import DispatchContext
from ratatoskr.memory import open_memory_store
from ratatoskr.sqlite.crashtest import kill_mid_stream

from .crash_writer import BATCH, DIM, batch

WRITER = Path(__file__).with_name("crash_writer.py")


def run_and_kill(db: str, start: int, min_acks: int, rng: random.Random) -> list[int]:
    return kill_mid_stream(
        [str(WRITER), db, str(start)], min_acks=min_acks, rng=rng, max_delay_s=0.05
    )


@pytest.mark.slow
def test_sigkill_loses_nothing_acknowledged_and_leaves_no_partial_batch(tmp_path: Path) -> None:
    db = str(tmp_path / "crash.db")
    rng = random.Random(7)
    acked: list[int] = []
    start = 0
    for _round in range(4):
        acks = run_and_kill(db, start, min_acks=3, rng=rng)
        acked += acks
        start = acks[-1] + 2  # the batch after the last ack may or may not have landed
        store = open_memory_store(db, embedding_dim=DIM)
        with store.database.read() as conn:
            chunks = conn.execute("SELECT count(*) FROM memory_chunks").fetchall()[0][0]
            vecs = conn.execute("SELECT count(*) FROM memory_vec").fetchall()[0][0]
            ids = {str(r[0]) for r in conn.execute("SELECT chunk_id FROM memory_chunks")}
        assert chunks == vecs  # one-to-one, no orphan index rows
        by_batch: dict[int, set[str]] = {}
        for cid in ids:
            by_batch.setdefault(int(cid[1:].split("-")[0]), set()).add(cid)
        for n, present in by_batch.items():
            expected = {f"b{n}-{i}" for i in range(BATCH)}
            # a batch is whole, except the one row the next batch's delete removed
            assert present in (expected, expected - {f"b{n}-0"}), f"partial batch {n}"
        for n in acks:
            assert n in by_batch, f"acknowledged batch {n} lost"
        # Retrying the in-flight batch is idempotent: replayed if it landed, written if not.
        inflight = acks[-1] + 1
        ctx = DispatchContext(actor="crash-writer")
        landed = inflight in by_batch
        result = store.upsert_many(batch(inflight), idempotency_key=f"batch-{inflight}", ctx=ctx)
        assert result == {"upserted": BATCH, "replayed": landed}
        assert len(store.get_many([f"b{inflight}-{i}" for i in range(BATCH)])) == BATCH
        store.close()
    assert len(acked) >= 12
