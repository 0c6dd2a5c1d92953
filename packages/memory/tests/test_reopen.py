"""Reopen from the sidecar: no rebuild when it is current, a catch-up when it is
behind, a rebuild when it is foreign, torn or newer than the database, and a
consistent index after a writer (or a sidecar writer) is SIGKILLed mid-write."""

from __future__ import annotations

import os
import random
import shutil
import stat
from pathlib import Path
from typing import Any

import apsw
import orjson
import pytest

from bifrost.context import DispatchContext
from ratatoskr.memory import open_memory_store, sidecar
from ratatoskr.memory.sync import SyncedIndex, cache_verdict
from ratatoskr.sqlite import StorageInconsistent
from ratatoskr.sqlite.crashtest import kill_mid_stream

from .crash_writer import DIM, batch

CTX = DispatchContext(actor="reopen")
WRITER = Path(__file__).with_name("crash_writer.py")


def fill(path: str, start: int, count: int) -> None:
    store = open_memory_store(path, embedding_dim=DIM)
    for n in range(start, start + count):
        store.upsert_many(batch(n), idempotency_key=f"batch-{n}", ctx=CTX)
        if n % 3 == 0:
            store.delete_many([f"b{n}-1", f"b{n}-2"])
    store.close()
    open_memory_store(path, embedding_dim=DIM).close()  # leaves a sidecar current to it


def answers(path: str) -> list[Any]:
    store = open_memory_store(path, embedding_dim=DIM)
    out: list[Any] = [store.count()]
    for seed in range(6):
        rng = random.Random(seed)
        vector = [rng.uniform(-1, 1) for _ in range(DIM)]
        for scope in (None, {"tenant": "t0"}, {"tenant": "t2"}):
            got = store.search(vector, top_k=25, scope_all=scope, include={"embedding": False})
            out.append([(row["chunk_id"], row["score"]) for row in got])
    with store.database.read() as conn:
        db_ids = {str(r[0]) for r in conn.execute("SELECT chunk_id FROM memory_chunks")}
    assert set(store._sync.index._row) == db_ids
    store.close()
    return out


def rebuilt(path: str, tmp_path: Path) -> list[Any]:
    """The answers of a copy of the database without its sidecar (built from SQLite)."""
    copy = tmp_path / f"copy-{random.random()}.db"
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            shutil.copyfile(path + suffix, str(copy) + suffix)
    return answers(str(copy))


def test_a_current_sidecar_is_mapped_without_a_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "m.db")
    fill(db, 0, 12)
    expected = rebuilt(db, tmp_path)
    open_memory_store(db, embedding_dim=DIM).close()  # leaves a sidecar current to the file
    side = db + sidecar.SUFFIX
    assert stat.S_IMODE(os.stat(side).st_mode) == 0o600
    monkeypatch.setattr(SyncedIndex, "_reload", lambda *args: pytest.fail("rebuilt"))
    assert answers(db) == expected


def test_a_sidecar_behind_the_database_catches_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "m.db")
    fill(db, 0, 6)
    open_memory_store(db, embedding_dim=DIM).close()
    old = Path(db + sidecar.SUFFIX).read_bytes()
    fill(db, 6, 6)  # rewrites the sidecar at its open; put the old one back
    Path(db + sidecar.SUFFIX).write_bytes(old)
    expected = rebuilt(db, tmp_path)
    monkeypatch.setattr(SyncedIndex, "_reload", lambda *args: pytest.fail("rebuilt"))
    assert answers(db) == expected


@pytest.mark.parametrize(
    "damage",
    [
        "truncate",
        "flip_meta",
        "garbage",
        "foreign",
        "newer",
        "meta_list",
        "classes_not_a_list",
        "classes_not_pairs",
        "fifo",
    ],
)
def test_a_bad_sidecar_is_ignored_and_rebuilt(tmp_path: Path, damage: str) -> None:
    db = str(tmp_path / "m.db")
    fill(db, 0, 8)
    expected = rebuilt(db, tmp_path)
    side = Path(db + sidecar.SUFFIX)
    data = side.read_bytes()
    if damage == "truncate":
        side.write_bytes(data[: len(data) - 100])
    elif damage == "flip_meta":
        side.write_bytes(data[:80] + bytes([data[80] ^ 1]) + data[81:])
    elif damage == "garbage":
        side.write_bytes(os.urandom(len(data)))
    elif damage in ("meta_list", "classes_not_a_list", "classes_not_pairs"):
        # Whole, its checksums right, its metadata not what a writer writes.
        with open_memory_store(db, embedding_dim=DIM).database.read() as conn:
            origin = sidecar.lineage(conn)
        meta = {
            "meta_list": b"[1, 2]",
            "classes_not_a_list": orjson.dumps({"lineage": origin, "ids": [], "classes": 3}),
            "classes_not_pairs": orjson.dumps({"lineage": origin, "ids": [], "classes": [7]}),
        }[damage]
        head = sidecar._header(DIM, 0, 0, 0.0, 0.0, meta)
        pad = b"\0" * sidecar._pad(len(head))
        side.write_bytes(head + pad + meta + b"\0" * sidecar._pad(len(meta)))
    elif damage == "fifo":  # opening a FIFO for reading would block the open forever
        side.unlink()
        os.mkfifo(side)
    elif damage == "foreign":
        other = str(tmp_path / "other.db")
        fill(other, 99, 8)  # another database (same seq and count), created later
        shutil.copyfile(other + sidecar.SUFFIX, side)
    else:
        newer = str(tmp_path / "newer.db")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(db + suffix):
                shutil.copyfile(db + suffix, newer + suffix)
        fill(newer, 8, 4)  # the same lineage, further on: a backup restored under it
        shutil.copyfile(newer + sidecar.SUFFIX, side)
    assert answers(db) == expected
    # The rebuild left a sidecar that describes the database again.
    with open_memory_store(db, embedding_dim=DIM).database.read() as conn:
        image = sidecar.read(str(side), DIM, lineage=sidecar.lineage(conn))
    assert image is not None


@pytest.mark.slow
def test_reopen_after_sigkill_mid_write_gives_a_consistent_index(tmp_path: Path) -> None:
    """The writer is killed inside a batch, again and again; every reopen (sidecar
    plus change log) answers like an index rebuilt from SQLite."""
    db = str(tmp_path / "crash.db")
    rng = random.Random(11)
    start = 0
    for _round in range(4):
        acks = kill_mid_stream([str(WRITER), db, str(start)], min_acks=3, rng=rng)
        start = acks[-1] + 2
        assert answers(db) == rebuilt(db, tmp_path)


_SIDECAR_WRITER = """
import sys
from ratatoskr.memory import open_memory_store, sidecar
store = open_memory_store(sys.argv[1], embedding_dim=int(sys.argv[2]))
with store.database.read() as conn:
    origin = sidecar.lineage(conn)
image = store._sync.index.image()
n = 0
while True:
    sidecar.write(sys.argv[1] + sidecar.SUFFIX, image, lineage=origin)
    print(f"ack {n}", flush=True)
    n += 1
"""


@pytest.mark.slow
def test_a_sidecar_writer_killed_mid_write_leaves_a_whole_file(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    fill(db, 0, 40)
    expected = rebuilt(db, tmp_path)
    rng = random.Random(5)
    for _round in range(4):
        kill_mid_stream(["-c", _SIDECAR_WRITER, db, str(DIM)], min_acks=2, rng=rng)
        temps = [p for p in os.listdir(tmp_path) if ".tmp-" in p]
        with open_memory_store(db, embedding_dim=DIM).database.read() as conn:
            image = sidecar.read(db + sidecar.SUFFIX, DIM, lineage=sidecar.lineage(conn))
        assert image is not None  # the old file or the new one, never a torn one
        assert answers(db) == expected
        assert len(temps) <= 1 + _round  # at most the one each kill interrupted


def test_a_rebuild_reads_json_form_chunks_from_vec0(tmp_path: Path) -> None:
    """Chunks whose embedding holds an int are stored as JSON (no float64 blob); a
    rebuild takes their vectors from vec0 and answers as before."""
    db = str(tmp_path / "m.db")
    store = open_memory_store(db, embedding_dim=DIM)
    records = [
        {
            "id": f"j{i}",
            "embedding": [i % 5 - 2, 1, *[float(d) for d in range(DIM - 2)]],
            "scope": {},
        }
        for i in range(30)
    ] + [
        {"id": f"f{i}", "embedding": [float(i) + 0.5] * DIM, "scope": {"tenant": "t0"}}
        for i in range(5)
    ]
    store.upsert_many(records, idempotency_key="mixed", ctx=CTX)
    before = store.search([1.0] * DIM, top_k=35)
    store.close()
    os.unlink(db + sidecar.SUFFIX)
    again = open_memory_store(db, embedding_dim=DIM)
    assert again.search([1.0] * DIM, top_k=35) == before
    again.close()


def test_vec0_and_the_chunks_disagreeing_is_a_typed_storage_error(tmp_path: Path) -> None:
    """A rebuild that finds memory_vec missing a chunk's row raises StorageInconsistent
    (a StorageError the provider names the setting for), not a bare RuntimeError."""
    db = str(tmp_path / "m.db")
    store = open_memory_store(db, embedding_dim=DIM)
    store.upsert_many(
        [{"id": f"c{i}", "embedding": [float(i) + 0.5] * DIM, "scope": {}} for i in range(3)],
        idempotency_key="three",
        ctx=CTX,
    )
    with store.database.write() as conn:
        conn.execute("DELETE FROM memory_vec WHERE chunk_id = ?", ("c1",))
    store.close()
    os.unlink(db + sidecar.SUFFIX)
    with pytest.raises(StorageInconsistent, match="memory_vec and memory_chunks disagree"):
        open_memory_store(db, embedding_dim=DIM)


def _sidecar_seq(db: str) -> int | None:
    store = open_memory_store(db, embedding_dim=DIM)
    with store.database.read() as conn:
        image = sidecar.read(db + sidecar.SUFFIX, DIM, lineage=sidecar.lineage(conn))
    store._sync._saved_seq = store._sync.seq  # this probe's close leaves the file alone
    store.close()
    return None if image is None else image.seq


def test_a_close_after_writes_leaves_a_sidecar_current_to_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "m.db")
    store = open_memory_store(db, embedding_dim=DIM)
    for n in range(6):
        store.upsert_many(batch(n), idempotency_key=f"batch-{n}", ctx=CTX)
    store.delete_many(["b1-1", "b4-2"])
    seq = store._sync.seq
    store.close()
    store.close()  # idempotent, and writes nothing more
    expected = rebuilt(db, tmp_path)
    assert _sidecar_seq(db) == seq
    # The next open maps it: no rebuild, nothing to catch up.
    monkeypatch.setattr(SyncedIndex, "_reload", lambda *args: pytest.fail("rebuilt"))
    monkeypatch.setattr(
        "ratatoskr.memory.index.VectorIndex.upsert_many",
        lambda *args: pytest.fail("caught up"),
    )
    assert answers(db) == expected


def test_a_close_without_writes_leaves_the_sidecar_alone(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    fill(db, 0, 4)
    side = Path(db + sidecar.SUFFIX)
    before = (side.read_bytes(), side.stat().st_mtime_ns, side.stat().st_ino)
    store = open_memory_store(db, embedding_dim=DIM)
    store.search([1.0] * DIM, top_k=3)
    store.close()
    assert (side.read_bytes(), side.stat().st_mtime_ns, side.stat().st_ino) == before


def test_a_store_behind_another_writer_does_not_overwrite_its_sidecar(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    fill(db, 0, 2)
    behind = open_memory_store(db, embedding_dim=DIM)
    behind.upsert_many(batch(2), idempotency_key="batch-2", ctx=CTX)
    writer = open_memory_store(db, embedding_dim=DIM)
    writer.upsert_many(batch(3), idempotency_key="batch-3", ctx=CTX)
    seq = writer._sync.seq
    writer.close()
    behind.close()  # its index is behind the database: the newer sidecar stays
    assert _sidecar_seq(db) == seq
    assert answers(db) == rebuilt(db, tmp_path)


def test_a_failed_sidecar_write_at_close_still_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "m.db")
    store = open_memory_store(db, embedding_dim=DIM)
    store.upsert_many(batch(0), idempotency_key="batch-0", ctx=CTX)

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(sidecar, "write", refuse)
    store.close()
    monkeypatch.undo()
    assert answers(db) == rebuilt(db, tmp_path)


def test_cache_verdict_judges_a_sidecar_as_the_next_open_would(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    fill(path, 0, 4)
    store = open_memory_store(path, embedding_dim=DIM)

    def verdict() -> str:
        with store.database.read() as conn:
            return cache_verdict(conn, DIM).status

    assert verdict() == "current"
    with store.database.read() as conn:
        assert cache_verdict(conn, DIM + 1).status == "rebuild"  # another dimension
    saved = Path(path + sidecar.SUFFIX).read_bytes()
    store.upsert_many(batch(9), idempotency_key="later", ctx=CTX)
    assert verdict() == "behind"
    other = str(tmp_path / "other.db")
    fill(other, 0, 4)
    shutil.copyfile(other + sidecar.SUFFIX, path + sidecar.SUFFIX)  # another database's
    assert verdict() == "rebuild"
    Path(path + sidecar.SUFFIX).write_bytes(saved[:-1])  # torn
    assert verdict() == "rebuild"
    os.unlink(path + sidecar.SUFFIX)
    assert verdict() == "rebuild"
    store.close()
    fill(path, 20, 2)  # a current sidecar again; then the file made to look one migration behind
    conn = apsw.Connection(path)
    conn.execute(
        "DELETE FROM ratatoskr_schema WHERE plane = 'memory'"
        " AND version = (SELECT max(version) FROM ratatoskr_schema WHERE plane = 'memory')"
    )
    found = cache_verdict(conn, DIM)
    assert found.status == "rebuild" and "migrates" in found.detail
    conn.close()
