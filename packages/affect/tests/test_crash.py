"""Durability: SIGKILL a writer mid-stream; nothing acknowledged is lost, nothing is partial."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from bifrost.context import DispatchContext
from ratatoskr.affect import open_affect_store
from ratatoskr.sqlite.crashtest import kill_mid_stream

from .crash_writer import ACTOR, FRESH, SHARED, batch

WRITER = Path(__file__).with_name("crash_writer.py")


def run_and_kill(db: str, start: int, min_acks: int, rng: random.Random) -> list[int]:
    return kill_mid_stream(
        [str(WRITER), db, str(start)], min_acks=min_acks, rng=rng, max_delay_s=0.03
    )


@pytest.mark.slow
def test_sigkill_loses_nothing_acknowledged_and_leaves_no_partial_batch(tmp_path: Path) -> None:
    db = str(tmp_path / "crash.db")
    rng = random.Random(11)
    start = 0
    total_acks = 0
    for _round in range(5):
        acks = run_and_kill(db, start, min_acks=rng.randint(2, 6), rng=rng)
        total_acks += len(acks)
        store = open_affect_store(db)
        # The shared keys move together: one revision, written by one batch.
        shared = store.get_many([f"s{i}" for i in range(SHARED)])
        assert len(shared) == SHARED
        revisions = {r["revision"] for r in shared}
        assert len(revisions) == 1, "shared keys at different revisions: partial batch"
        head = revisions.pop()
        assert {r["batch"] for r in shared} == {head - 1}  # batch n writes revision n + 1
        for i in range(SHARED):
            hist = store.history(f"s{i}", limit=500)
            assert [r["revision"] for r in hist["items"]] == list(range(head, 0, -1))
            assert [r["batch"] for r in hist["items"]] == list(range(head - 1, -1, -1))
        # Every batch up to the head is whole; nothing after it exists at all.
        for n in range(head + 1):
            fresh = store.get_many([f"b{n}-{i}" for i in range(FRESH)])
            assert len(fresh) == (FRESH if n < head else 0), f"batch {n} partial"
        for n in acks:
            assert n < head, f"acknowledged batch {n} lost"
        with store.database.read() as conn:
            (check,) = conn.execute("PRAGMA integrity_check").fetchall()
        assert check == ("ok",)
        # Retrying the in-flight batch is idempotent: replayed if it landed, written if not.
        inflight = acks[-1] + 1
        landed = inflight < head
        result = store.put_many(
            batch(inflight),
            idempotency_key=f"batch-{inflight}",
            ctx=DispatchContext(actor=ACTOR),
        )
        assert result == {"written": SHARED + FRESH, "replayed": landed}
        after = store.get("s0")
        assert after is not None
        start = after["revision"]  # the next batch number the writer continues with
        store.close()
    assert total_acks >= 10
