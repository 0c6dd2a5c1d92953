"""Durability: SIGKILL a writer mid-stream; nothing acknowledged is lost, nothing is partial."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bifrost.context import DispatchContext
from ratatoskr.memory import open_memory_store

from .crash_writer import BATCH, DIM, batch

WRITER = Path(__file__).with_name("crash_writer.py")


def run_and_kill(db: str, start: int, min_acks: int, rng: random.Random) -> list[int]:
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), db, str(start)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.stdout is not None
    acks: list[int] = []

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            acks.append(int(line.split()[1]))

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    deadline = time.monotonic() + 60
    while len(acks) < min_acks and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(rng.uniform(0, 0.05))  # land the kill anywhere inside a batch
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    t.join(5)
    assert len(acks) >= min_acks, "writer made no progress"
    return acks


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
