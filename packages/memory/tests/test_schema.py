"""Migrations: a schema v1 file upgrades in place at open (migration 2 moves all-float
embeddings into float64 blobs) and reads back equal, types included; a failed or
killed upgrade leaves the v1 file whole; v1 code refuses a v2 file."""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import pytest

from bifrost.context import DispatchContext
from bifrost.memory.validation import embedding_field, validate_embedding
from ratatoskr.memory import RatatoskrMemoryStore, open_memory_store, records
from ratatoskr.memory.records import unit_float64
from ratatoskr.memory.schema import migrations
from ratatoskr.sqlite import SchemaTooNew, StorageCorrupt
from ratatoskr.sqlite.crashtest import FixedDelay, kill_mid_stream

from .conftest import DIM
from .test_records import CASES, exact, record, without
from .v1_file import ACTOR, KEY, open_v1, write_v1_file

CTX = DispatchContext(actor=ACTOR)
LATEST = len(migrations(DIM))
WORKER = Path(__file__).with_name("migrate_worker.py")


def many(n: int, seed: int = 3, dim: int = DIM) -> list[dict[str, Any]]:
    """``n`` records over three tenants: mostly float embeddings, every 7th holding an
    int (stays JSON), every 11th under ``vector``."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(n):
        emb: list[Any] = [rng.uniform(-1, 1) for _ in range(dim)]
        if i % 7 == 0:
            emb[i % dim] = rng.randint(-3, 3) or 1
        field = "vector" if i % 11 == 0 else "embedding"
        out.append({"id": f"m{i:05d}", field: emb, "scope": {"tenant": f"t{i % 3}"}, "i": i})
    return out


def v1_records() -> list[dict[str, Any]]:
    return [record(c) for c in CASES] + many(2500)  # more rows than one rewrite batch


def columns(conn: apsw.Connection) -> list[str]:
    return [str(r[1]) for r in conn.execute("PRAGMA table_info(memory_chunks)")]


def dump(path: str) -> list[list[tuple[Any, ...]]]:
    conn = apsw.Connection(path)
    try:
        tables = [
            str(r[0])
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'memory_vec%' AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        out = [[tuple(r) for r in conn.execute("SELECT sql FROM sqlite_master ORDER BY name")]]
        out += [[tuple(r) for r in conn.execute(f"SELECT * FROM {t} ORDER BY 1")] for t in tables]
        return out
    finally:
        conn.close()


def brute_force(
    recs: list[dict[str, Any]], query: list[float], tenant: str, k: int
) -> list[tuple[str, float]]:
    """The exact top k of one tenant, scored the way the store scores (float64)."""
    scoped = [r for r in recs if r["scope"].get("tenant") == tenant]
    raw = [np.asarray(r[embedding_field(r)], dtype=np.float64) for r in scoped]
    scores = records.exact_scores(raw, unit_float64(validate_embedding(query, DIM)))
    ranked = sorted(zip((-scores).tolist(), [r["id"] for r in scoped], strict=True))[:k]
    return [(cid, -neg) for neg, cid in ranked]


def check_reads_back(
    store: RatatoskrMemoryStore, recs: list[dict[str, Any]], searches: int = 10
) -> None:
    by_id = {r["id"]: r for r in recs}
    ids = list(by_id)
    for start in range(0, len(ids), 1000):
        part = ids[start : start + 1000]
        got = store.get_many(part)
        assert exact(got) == exact([{**by_id[i], "revision": 1} for i in part])
    for rec in recs[: len(CASES)]:
        assert exact(store.get(rec["id"])) == exact({**rec, "revision": 1})
    rng = random.Random(5)
    for _ in range(searches):
        tenant = f"t{rng.randrange(3)}"
        query = [rng.uniform(-1, 1) for _ in range(DIM)]
        want = brute_force(recs, query, tenant, 20)
        for include in (None, {"embedding": False}):
            rows = store.search(query, top_k=20, scope_all={"tenant": tenant}, include=include)
            assert [(r["chunk_id"], r["score"]) for r in rows] == want  # bit-identical
            for r in rows:
                rec = by_id[r["chunk_id"]]
                kept = rec if include is None else without(rec, embedding_field(rec))
                assert exact(r["chunk"]) == exact(kept)


def test_migrations_are_append_only() -> None:
    steps = migrations(DIM)
    assert [m.version for m in steps] == [1, 2, 3, 4, 5, 6, 7]


def test_v1_file_upgrades_in_place_and_reads_back_equal(tmp_path: Path) -> None:
    path = str(tmp_path / "v1.db")
    recs = v1_records()
    write_v1_file(path, recs, dim=DIM)
    db = open_v1(path, DIM)
    with db.read() as conn:
        assert "embedding_f64" not in columns(conn)
    db.close()

    store = open_memory_store(path, embedding_dim=DIM)
    assert store.database.schema_version() == LATEST
    with store.database.read() as conn:
        rows = conn.execute(
            "SELECT chunk_id, record_json, embedding_key, embedding_f64 FROM memory_chunks"
        ).fetchall()
    by_id = {r["id"]: r for r in recs}
    for cid, text, key, blob in rows:
        rec = by_id[str(cid)]
        field = embedding_field(rec)
        if all(type(x) is float for x in rec[field]):
            assert key == field
            assert blob == np.asarray(rec[field], dtype="<f8").tobytes()
            assert field not in records.load_json(str(text))
        else:
            assert (key, blob) == (None, None)
            assert exact(records.load_json(str(text))) == exact(rec)
    check_reads_back(store, recs)
    # The v1 ledger entry still replays, and the upgraded file takes new writes.
    assert store.upsert_many(recs[:100], idempotency_key=KEY, ctx=CTX)["replayed"] is True
    store.upsert_many([{**recs[-1], "i": -1}], idempotency_key="new", ctx=CTX)
    assert store.get(recs[-1]["id"]) == {**recs[-1], "i": -1, "revision": 2}
    store.close()

    again = open_memory_store(path, embedding_dim=DIM)  # v2 at open: nothing to do
    assert again.database.schema_version() == LATEST
    check_reads_back(again, recs[:-1])
    again.close()


def test_failed_upgrade_leaves_the_v1_file_as_it_was(tmp_path: Path) -> None:
    path = str(tmp_path / "v1.db")
    recs = v1_records()
    write_v1_file(path, recs, dim=DIM)
    db = open_v1(path, DIM)
    with db.write() as conn:  # one damaged row, far past the first rewrite batch
        conn.execute("UPDATE memory_chunks SET record_json = '{\"id\": ' WHERE chunk_id = 'm02400'")
    db.close()
    before = dump(path)
    with pytest.raises(StorageCorrupt) as info:
        open_memory_store(path, embedding_dim=DIM)
    assert "m02400" not in str(info.value)
    assert dump(path) == before
    assert open_v1(path, DIM).schema_version() == 1


def test_v1_code_refuses_a_v2_file(tmp_path: Path) -> None:
    path = str(tmp_path / "v2.db")
    open_memory_store(path, embedding_dim=DIM).close()
    with pytest.raises(SchemaTooNew):
        open_v1(path, DIM)


@pytest.mark.slow
def test_sigkill_during_the_upgrade_leaves_v1_whole_or_v2_complete(tmp_path: Path) -> None:
    # 64 dims: enough bytes that the upgrade's rewrite spills pages into the WAL
    # before it commits, so a kill leaves uncommitted frames for recovery to drop.
    dim = 64
    recs = many(5000, dim=dim)
    pristine = str(tmp_path / "pristine.db")
    write_v1_file(pristine, recs, dim=dim)
    probe = str(tmp_path / "probe.db")
    shutil.copy(pristine, probe)
    start = time.perf_counter()
    open_memory_store(probe, embedding_dim=dim).close()
    upgrade_s = time.perf_counter() - start
    in_json = sum(1 for r in recs if not all(type(x) is float for x in r[embedding_field(r)]))
    outcomes: list[tuple[int, int]] = []
    for n, fraction in enumerate([0.2, 0.4, 0.6, 0.8, 3.0]):
        path = str(tmp_path / f"killed{n}.db")
        shutil.copy(pristine, path)
        # The worker acknowledges once imported, then opens (upgrades) the file.
        kill_mid_stream(
            [str(WORKER), path, str(dim)],
            min_acks=1,
            rng=FixedDelay(fraction),
            max_delay_s=upgrade_s,
        )
        wal = Path(path + "-wal")
        wal_bytes = wal.stat().st_size if wal.exists() else 0
        conn = apsw.Connection(path)  # recovers the WAL of the killed process
        version = int(
            conn.execute(  # type: ignore[arg-type]
                "SELECT max(version) FROM ratatoskr_schema WHERE plane = 'memory'"
            ).fetchall()[0][0]
        )
        outcomes.append((version, wal_bytes))
        if version == 1:
            assert "embedding_f64" not in columns(conn)
        else:  # every pending migration applies in the one transaction
            assert version == LATEST
            unmoved = conn.execute(
                "SELECT count(*) FROM memory_chunks WHERE embedding_f64 IS NULL"
            ).fetchall()[0][0]
            assert unmoved == in_json
        conn.close()
        store = open_memory_store(path, embedding_dim=dim)
        with store.database.read() as conn:
            assert conn.execute("SELECT count(*) FROM memory_chunks").fetchall() == [(len(recs),)]
        got = store.get_many([r["id"] for r in recs[:1000]])
        assert exact(got) == exact([{**r, "revision": 1} for r in recs[:1000]])
        store.close()
    # (schema version, WAL bytes) after each kill: v1 with a large WAL is a kill that
    # landed inside the upgrade after it had spilled pages.
    print(f"upgrade {upgrade_s:.2f} s; after each kill: {outcomes}")
