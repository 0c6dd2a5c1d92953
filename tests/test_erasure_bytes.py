"""Erasure leaves no bytes: a record written with sentinel strings (id, content,
distillate, scope value) and a distinctive embedding is erased by each route, and
none of its bytes is left in any live file of the plane (database, -wal, -shm, the
memory index's sidecar).

What "bytes" means here: each sentinel string's UTF-8; each float64 of the
embedding (8 bytes, as the stored blob holds it) and its decimal text; every run
of 4 consecutive float32s (16 bytes) of the embedding and of its unit vector (what
vec0 holds); the chunk's whole int8 code row and residual row in the index
sidecar (one code is one byte: only a row of them identifies a record).
"""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bifrost.context import DispatchContext
from ratatoskr.affect import open_affect_store
from ratatoskr.memory import open_memory_store, quantized

DIM = 64
SID = "sentinel-id-7f3a9c"
CONTENT = "SENTINEL-CONTENT-b41d"
DISTILLATE = "SENTINEL-DISTILLATE-c9e2"
USER = "sentinel-user-5a0f"
# The sentinel's tenant holds nothing else: its quota usage row must go with it.
TENANT = "sentinel-tenant-93be"
AFFECT_KEY = "sentinel-affect-key-e71b"
MOOD = "SENTINEL-MOOD-0d3c"
MEM_CTX = DispatchContext(actor="agent-1", plane="memory", verb="upsert_many")
AFF_CTX = DispatchContext(actor="agent-1", plane="affect", verb="put_many")


def embedding() -> np.ndarray[Any, Any]:
    return np.random.default_rng(20240517).uniform(-3.0, 3.0, DIM)


def memory_patterns() -> dict[str, bytes]:
    e = embedding()
    unit = (e / np.linalg.norm(e)).astype(np.float32)
    out = {"id": SID.encode(), "content": CONTENT.encode(), "distillate": DISTILLATE.encode()}
    out["scope"] = USER.encode()
    out["tenant"] = TENANT.encode()
    for i, x in enumerate(e):
        out[f"f64[{i}]"] = np.float64(x).tobytes()
        out[f"f64 text[{i}]"] = repr(float(x)).encode()
    for name, arr in (("f32", e.astype(np.float32)), ("unit f32", unit)):
        raw = arr.astype("<f4").tobytes()
        for i in range(0, DIM - 3):
            out[f"{name}[{i}:{i + 4}]"] = raw[4 * i : 4 * i + 16]
    codes = quantized.encode(unit.reshape(1, -1))
    out["int8 codes"] = codes.codes[0].tobytes()
    out["int8 residual"] = codes.resid[0].tobytes()
    return out


def affect_patterns() -> dict[str, bytes]:
    return {
        "key": AFFECT_KEY.encode(),
        "payload": MOOD.encode(),
        "scope": USER.encode(),
        "tenant": TENANT.encode(),
    }


def live_files(db: str) -> list[str]:
    return [p for p in glob.glob(db + "*") if os.path.isfile(p)]


def leaks(db: str, patterns: dict[str, bytes]) -> list[str]:
    found: list[str] = []
    for path in live_files(db):
        data = Path(path).read_bytes()
        found += [
            f"{name} in {os.path.basename(path)}" for name, p in patterns.items() if p in data
        ]
    return found


def sentinel_chunk() -> dict[str, Any]:
    return {
        "id": SID,
        "embedding": embedding().tolist(),
        "scope": {"tenant": TENANT, "end_user": USER},
        "content": CONTENT,
        "distillate": DISTILLATE,
    }


def filler(i: int) -> dict[str, Any]:
    rng = np.random.default_rng(i)
    return {
        "id": f"other-{i:04d}",
        "embedding": rng.uniform(-1, 1, DIM).tolist(),
        "scope": {"tenant": "t1", "end_user": f"u{i % 7}"},
        "content": f"content {i}",
    }


class Clock:
    def __init__(self) -> None:
        self.now = 1_750_000_000.0

    def __call__(self) -> float:
        return self.now


RETENTION_S = 3600.0


def fill_memory(db: str, clock: Clock | None = None) -> None:
    s = open_memory_store(db, embedding_dim=DIM, clock=clock or time.time)
    s.upsert_many([filler(i) for i in range(300)], idempotency_key="fill", ctx=MEM_CTX)
    s.upsert_many([sentinel_chunk()], idempotency_key="s1", ctx=MEM_CTX)
    if clock is not None:  # the sentinel expires first
        clock.now += RETENTION_S / 2
        s.upsert_many([filler(i) for i in range(300)], idempotency_key="fill3", ctx=MEM_CTX)
    s.upsert_many([filler(i) for i in range(300, 400)], idempotency_key="fill2", ctx=MEM_CTX)
    s.close()  # a sidecar that holds the sentinel's codes


def wait_flushed(store: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while store.database.erasure.flushed < 1:
        assert time.monotonic() < deadline, "the erasure was not flushed"
        time.sleep(0.05)


def erase_memory_by_delete(s: Any) -> None:
    assert s.delete_many([SID]) == {"deleted": 1}
    wait_flushed(s)  # the background flush: within ~1 s of the commit


def erase_memory_by_forget(s: Any) -> None:
    assert s.forget({"end_user": USER}) == 1  # flushed when it returns


def erase_memory_by_retention(s: Any) -> None:
    s.retention.clock.now += RETENTION_S / 2 + 1  # the sentinel is expired, no other chunk
    assert s.get(SID) is None  # from that instant
    assert s.sweep_expired() == 1  # what the background sweep runs
    wait_flushed(s)


@pytest.mark.parametrize(
    "erase", [erase_memory_by_delete, erase_memory_by_forget, erase_memory_by_retention]
)
def test_an_erased_chunk_leaves_no_bytes(tmp_path: Path, erase: Callable[[Any], None]) -> None:
    db = str(tmp_path / "memory.db")
    clock = Clock() if erase is erase_memory_by_retention else None
    fill_memory(db, clock)
    retention = RETENTION_S if clock is not None else None
    s = open_memory_store(db, embedding_dim=DIM, clock=clock or time.time, retention_s=retention)
    # While serving: every pattern is somewhere (so the check below can fail).
    present = {n.split(" in ")[0] for n in leaks(db, memory_patterns())}
    assert {"id", "content", "distillate", "scope", "tenant", "int8 codes"} <= present
    assert any(n.startswith("f64[") for n in present)
    assert s.search(embedding().tolist(), top_k=1)[0]["chunk_id"] == SID
    erase(s)
    assert leaks(db, memory_patterns()) == []
    # Still serving, still whole: the others are all there, and searchable.
    assert s.count() == 400
    assert len(s.search(embedding().tolist(), top_k=5)) == 5
    s.close()
    assert leaks(db, memory_patterns()) == []
    again = open_memory_store(db, embedding_dim=DIM)
    assert again.count() == 400 and again.get(SID) is None
    again.close()


def fill_affect(db: str) -> None:
    s = open_affect_store(db)
    others = [{"key": f"k{i}", "scope": {"tenant": "t1"}, "mood": f"m{i}"} for i in range(200)]
    s.put_many(others, idempotency_key="fill", ctx=AFF_CTX)
    for rev in range(5):  # a history of five revisions
        rec = {"key": AFFECT_KEY, "scope": {"tenant": TENANT, "end_user": USER}, "mood": MOOD}
        s.put_many([{**rec, "n": rev}], idempotency_key=f"s{rev}", ctx=AFF_CTX)
    s.close()


@pytest.mark.parametrize("route", ["delete_many", "forget"])
def test_an_erased_affect_key_leaves_no_bytes_of_its_history(tmp_path: Path, route: str) -> None:
    db = str(tmp_path / "affect.db")
    fill_affect(db)
    s = open_affect_store(db)
    assert {n.split(" in ")[0] for n in leaks(db, affect_patterns())} == {
        "key",
        "payload",
        "scope",
        "tenant",
    }
    if route == "delete_many":
        assert s.delete_many([AFFECT_KEY]) == {"deleted": 1}
        wait_flushed(s)
    else:
        assert s.forget({"end_user": USER}) == 1
    assert leaks(db, affect_patterns()) == []
    assert len(s.get_many([f"k{i}" for i in range(200)])) == 200
    s.close()
    assert leaks(db, affect_patterns()) == []
