"""Durability on PostgreSQL: SIGKILL a real writer process mid-batch; every
acknowledged batch survives whole, no partial batch is visible, and retrying the
batch in flight is a replay exactly when it had committed.

The writers are the planes' own (``packages/memory/tests/crash_writer.py``,
``packages/affect/tests/crash_writer.py``), run unchanged through
:mod:`workers_pg` with their store in a PostgreSQL schema; the kill is
``ratatoskr.sqlite.crashtest.kill_mid_stream``'s, as in the planes' SQLite crash
tests. The checks read through the store's verbs only, so they hold on either
backend (``place`` takes a SQLite file as well; SQLite's vector index and
``PRAGMA integrity_check`` are then checked too): ``make test`` runs them on
PostgreSQL, beside the planes' own SQLite crash tests.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bifrost.context import DispatchContext
from ratatoskr.affect import SqliteAffectStore
from ratatoskr.memory import SqliteMemoryStore
from ratatoskr.sqlite.crashtest import kill_mid_stream

from ...affect.tests import crash_writer as affect_writer
from ...memory.tests import crash_writer as memory_writer
from .backends_pg import AffectStore, MemoryStore, Place, scratch_schema

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]  # `-m packages.postgres.tests.workers_pg` from here


@pytest.fixture
def place(pg_dsn: str) -> Iterator[Place]:
    with scratch_schema(pg_dsn) as schema:
        yield Place("postgres", pg_dsn, schema)


@pytest.fixture(autouse=True)
def _workers_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    # kill_mid_stream hands its children this process's sys.path.
    monkeypatch.syspath_prepend(str(ROOT))


def run_and_kill(
    role: str, place: Place, start: int, min_acks: int, rng: random.Random
) -> list[int]:
    argv = ["-m", "packages.postgres.tests.workers_pg", role, *place.argv(), str(start)]
    return kill_mid_stream(argv, min_acks=min_acks, rng=rng, max_delay_s=0.05)


def memory_ids(n: int) -> list[str]:
    return [f"b{n}-{i}" for i in range(memory_writer.BATCH)]


def sqlite_memory_consistent(store: MemoryStore) -> None:
    """SQLite only: the vector index is one-to-one with the chunks, the file is sound."""
    if isinstance(store, SqliteMemoryStore):
        with store.database.read() as conn:
            chunks = conn.execute("SELECT count(*) FROM memory_chunks").fetchall()
            vecs = conn.execute("SELECT count(*) FROM memory_vec").fetchall()
            check = conn.execute("PRAGMA integrity_check").fetchall()
        assert chunks == vecs
        assert check == [("ok",)]


def test_memory_sigkill_mid_batch(place: Place) -> None:
    """The memory writer upserts batch n (ids ``b<n>-*``), then deletes ``b<n-1>-0``,
    then acknowledges n; each round restarts it two batches past its last ack."""
    rng = random.Random(7)
    acked: list[int] = []
    start = 0
    for _round in range(3):
        acks = run_and_kill("memory-crash", place, start, min_acks=3, rng=rng)
        acked += acks
        inflight = acks[-1] + 1
        store = place.open_memory(embedding_dim=memory_writer.DIM)
        present: dict[int, list[dict[str, Any]]] = {}
        for n in range(inflight + 2):
            present[n] = store.get_many(memory_ids(n))
        for n, rows in present.items():
            got = {r["id"] for r in rows}
            whole = set(memory_ids(n))
            # whole, or without the one row the next batch deleted; never a part
            assert got in (set(), whole, whole - {f"b{n}-0"}), f"partial batch {n}"
            expected = {r["id"]: r for r in memory_writer.batch(n)}
            for r in rows:
                assert (r["content"], r["batch"], r["revision"]) == (
                    expected[r["id"]]["content"],
                    n,
                    1,
                ), r["id"]
        for n in acked:
            assert present[n], f"acknowledged batch {n} lost"
        assert not present[inflight + 1]  # nothing past the batch in flight was written
        assert store.count() == sum(len(rows) for rows in present.values())
        sqlite_memory_consistent(store)
        # Retrying the batch in flight: replayed if it landed, written if not.
        landed = bool(present[inflight])
        result = store.upsert_many(
            memory_writer.batch(inflight),
            idempotency_key=f"batch-{inflight}",
            ctx=DispatchContext(actor="crash-writer"),
        )
        assert result == {"upserted": memory_writer.BATCH, "replayed": landed}
        assert len(store.get_many(memory_ids(inflight))) == memory_writer.BATCH
        store.close()
        start = inflight + 1
    assert len(acked) >= 9


def test_affect_sigkill_mid_batch(place: Place) -> None:
    """The affect writer's batch n moves the shared keys ``s*`` to revision n + 1 and
    creates ``b<n>-*``; each round restarts it at the shared keys' next revision."""
    rng = random.Random(11)
    start = 0
    total = 0
    shared_keys = [f"s{i}" for i in range(affect_writer.SHARED)]
    for _round in range(3):
        acks = run_and_kill("affect-crash", place, start, min_acks=rng.randint(2, 6), rng=rng)
        total += len(acks)
        store: AffectStore = place.open_affect()
        shared = store.get_many(shared_keys)
        assert len(shared) == affect_writer.SHARED
        revisions = {r["revision"] for r in shared}
        assert len(revisions) == 1, "shared keys at different revisions: partial batch"
        head = revisions.pop()
        assert {r["batch"] for r in shared} == {head - 1}
        for key in shared_keys:
            items = store.history(key, limit=500)["items"]
            assert [r["revision"] for r in items] == list(range(head, 0, -1))
            assert [r["batch"] for r in items] == list(range(head - 1, -1, -1))
        for n in range(head + 1):  # every batch below the head whole, none after it
            fresh = store.get_many([f"b{n}-{i}" for i in range(affect_writer.FRESH)])
            assert len(fresh) == (affect_writer.FRESH if n < head else 0), f"batch {n} partial"
        assert all(n < head for n in acks), "an acknowledged batch was lost"
        if isinstance(store, SqliteAffectStore):
            with store.database.read() as conn:
                assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        inflight = acks[-1] + 1
        result = store.put_many(
            affect_writer.batch(inflight),
            idempotency_key=f"batch-{inflight}",
            ctx=DispatchContext(actor=affect_writer.ACTOR),
        )
        assert result == {
            "written": affect_writer.SHARED + affect_writer.FRESH,
            "replayed": inflight < head,
        }
        after = store.get("s0")
        assert after is not None
        start = int(after["revision"])
        store.close()
    assert total >= 6
