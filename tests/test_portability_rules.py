"""The rules of an import and an export (:mod:`bifrost.portability`) on every backend —
the reference stores, SQLite and PostgreSQL — held to one test body each:

- an export leaves out chunks expired under the store's retention, as every verb
  does (an import elsewhere would bring them back for good);
- an import skips entries already expired under the destination's retention
  (counted as ``expired``) and writes over a chunk the destination holds only as
  an expired one (it is absent: no conflict, no scope check);
- ``replace`` numbers a record above the revision it overwrites (optimistic
  locking sees the change), refuses to move a record to another scope unless
  told it may (nothing of the batch written), and running it again changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bifrost.consumer.testing import InMemoryAffectStore, InMemoryMemoryStore
from bifrost.context import DispatchContext
from bifrost.errors import RevisionMismatch
from bifrost.portability import (
    ImportScopeChange,
    validate_chunk_import,
    validate_key_import,
)
from ratatoskr.affect import open_affect_store
from ratatoskr.affect.postgres import open_postgres_affect_store
from ratatoskr.memory import open_memory_store
from ratatoskr.memory.postgres import open_postgres_memory_store

from .test_postgres_provider import database, pg_dsn  # noqa: F401 - fixtures

CTX = DispatchContext(actor="agent", scope={})
DIM = 4
RETENTION = 100.0
# PostgreSQL: the session's server (slow: `make unit` leaves it out).
BACKENDS = ["reference", "sqlite", pytest.param("postgres", marks=pytest.mark.slow)]


class Clock:
    """A clock the test moves."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


Opener = Callable[..., Any]


@pytest.fixture
def open_memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """``open_memory(clock, retention_s)``: a memory store of the test's backend."""
    backend: str = request.param
    made: list[Any] = []

    def make(clock: Clock, retention_s: float | None = RETENTION) -> Any:
        store: Any
        if backend == "reference":
            store = InMemoryMemoryStore(DIM, clock=clock, retention_s=retention_s)
        elif backend == "sqlite":
            path = tmp_path / f"memory{len(made)}.db"
            store = open_memory_store(
                str(path), embedding_dim=DIM, clock=clock, retention_s=retention_s
            )
        else:
            store = open_postgres_memory_store(
                request.getfixturevalue("database"),
                embedding_dim=DIM,
                schema=f"memory{len(made)}",
                clock=clock,
                retention_s=retention_s,
            )
        made.append(store)
        return store

    yield make
    for store in made:
        if backend != "reference":
            store.close()


@pytest.fixture
def open_affect(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """``open_affect()``: an affect store of the test's backend."""
    backend: str = request.param
    made: list[Any] = []

    def make() -> Any:
        store: Any
        if backend == "reference":
            store = InMemoryAffectStore()
        elif backend == "sqlite":
            store = open_affect_store(str(tmp_path / "affect.db"))
        else:
            store = open_postgres_affect_store(request.getfixturevalue("database"))
        made.append(store)
        return store

    yield make
    for store in made:
        if backend != "reference":
            store.close()


def chunk(cid: str, tenant: str = "t", content: str = "c") -> dict[str, Any]:
    return {
        "id": cid,
        "embedding": [1.0, 0.5, 0.25, float(len(cid))],
        "scope": {"tenant": tenant},
        "content": content,
    }


def upsert(store: Any, records: list[dict[str, Any]], key: str) -> None:
    store.upsert_many(records, idempotency_key=key, ctx=CTX)


def exported(store: Any, page: int = 2) -> list[tuple[str, int, float]]:
    """Every page of the store's export, as (id, revision, written_at)."""
    out: list[tuple[str, int, float]] = []
    after: str | None = None
    while True:
        rows, after = store.export_page(after, page, {})
        out += [(c.chunk_id, c.revision, c.written_at) for c in rows]
        if after is None:
            return out


def entry(record: dict[str, Any], revision: int, written_at: float) -> dict[str, Any]:
    return {"record": record, "revision": revision, "written_at": written_at}


def chunks(entries: list[dict[str, Any]]) -> Any:
    return validate_chunk_import(entries, embedding_dim=DIM, max_batch=100)


@pytest.mark.parametrize("open_memory", BACKENDS, indirect=True)
def test_export_leaves_out_expired_chunks(open_memory: Opener) -> None:
    clock = Clock(1000.0)
    store = open_memory(clock)
    upsert(store, [chunk("a-old"), chunk("b-old"), chunk("c-kept"), chunk("d-old")], "1")
    clock.now = 1090.0
    upsert(store, [chunk("c-kept", content="again"), chunk("e-fresh")], "2")
    clock.now = 1150.0  # cutoff 1050: what was last written at 1000 is expired
    assert store.get("a-old") is None
    assert exported(store) == [("c-kept", 2, 1090.0), ("e-fresh", 1, 1090.0)]
    assert exported(store, page=1) == exported(store, page=1000)
    clock.now = 1200.0  # and once the rest expires, nothing is left to export
    assert exported(store) == []


@pytest.mark.parametrize("open_memory", BACKENDS, indirect=True)
def test_import_skips_expired_entries_and_writes_over_expired_chunks(
    open_memory: Opener,
) -> None:
    clock = Clock(1000.0)
    store = open_memory(clock)
    # Held only as an expired chunk of another tenant at revision 2: absent to the import.
    upsert(store, [chunk("held", tenant="u")], "1")
    upsert(store, [chunk("held", tenant="u", content="two")], "2")
    clock.now = 1150.0
    batch = chunks(
        [
            entry(chunk("gone", content="old"), 4, 1000.0),  # expired here: skipped
            entry(chunk("held", content="mine"), 3, 1140.0),
            entry(chunk("live"), 1, 1100.0),
        ]
    )
    outcome = store.import_chunks(batch, "fail")
    assert (outcome.written, outcome.skipped, outcome.replaced, outcome.expired) == (2, 0, 0, 1)
    assert store.get("gone") is None
    held = store.get("held")
    assert (held["content"], held["scope"], held["revision"]) == ("mine", {"tenant": "t"}, 3)
    assert [cid for cid, _r, _w in exported(store)] == ["held", "live"]
    # Running it again changes nothing (the expired entry is still skipped).
    again = store.import_chunks(batch, "fail")
    assert (again.written, again.skipped, again.replaced, again.expired) == (0, 2, 0, 1)
    # A store without retention takes every entry.
    keeper = open_memory(clock, None)
    assert keeper.import_chunks(batch, "fail").written == 3


@pytest.mark.parametrize("open_memory", BACKENDS, indirect=True)
def test_replace_numbers_above_and_refuses_a_scope_change(open_memory: Opener) -> None:
    clock = Clock(1000.0)
    store = open_memory(clock, None)
    for n in range(3):
        upsert(store, [chunk("victim", tenant="u", content="private")], f"v{n}")
    upsert(store, [chunk("mine", content="before")], "m")
    batch = chunks(
        [
            entry(chunk("mine", content="after"), 1, 1000.0),
            entry(chunk("victim", tenant="t", content="attacker"), 1, 1000.0),
        ]
    )
    with pytest.raises(ImportScopeChange) as caught:
        store.import_chunks(batch, "replace")
    assert caught.value.index == 1
    assert "attacker" not in caught.value.message and '"u"' not in caught.value.message
    # Nothing of the batch was written.
    assert [(r["content"], r["revision"]) for r in store.get_many(["mine", "victim"])] == [
        ("before", 1),
        ("private", 3),
    ]
    outcome = store.import_chunks(batch, "replace", allow_scope_change=True)
    assert (outcome.written, outcome.replaced) == (0, 2)
    got = {r["id"]: r for r in store.get_many(["mine", "victim"])}
    assert (got["mine"]["content"], got["mine"]["revision"]) == ("after", 2)
    assert (got["victim"]["scope"], got["victim"]["revision"]) == ({"tenant": "t"}, 4)
    # A client that read "mine" at revision 1 sees the change.
    with pytest.raises(RevisionMismatch):
        store.upsert_many(
            [chunk("mine", content="stale")],
            idempotency_key="stale",
            ctx=CTX,
            expected_revisions={"mine": 1},
        )
    # Running the replace again changes nothing: the held records are the file's, later.
    again = store.import_chunks(batch, "replace")
    assert (again.written, again.skipped, again.replaced) == (0, 2, 0)
    assert [r["revision"] for r in store.get_many(["mine", "victim"])] == [2, 4]
    # A file revision above the held one is kept.
    ahead = chunks([entry(chunk("mine", content="ahead"), 9, 1000.0)])
    store.import_chunks(ahead, "replace")
    assert store.get("mine")["revision"] == 9


def put(store: Any, key: str, tenant: str, value: int, idem: str) -> None:
    store.put_many(
        [{"key": key, "scope": {"tenant": tenant}, "v": value}], idempotency_key=idem, ctx=CTX
    )


def key_entry(key: str, tenant: str, values: list[int]) -> dict[str, Any]:
    return {
        "key": key,
        "revision": len(values),
        "history": [
            {
                "record": {"key": key, "scope": {"tenant": tenant}, "v": v},
                "revision": n + 1,
                "recorded_at": f"2025-01-01T00:00:0{n}.000000Z",
            }
            for n, v in enumerate(values)
        ],
    }


@pytest.mark.parametrize("open_affect", BACKENDS, indirect=True)
def test_affect_replace_numbers_above_and_refuses_a_scope_change(open_affect: Opener) -> None:
    store = open_affect()
    for n in range(3):
        put(store, "victim", "u", n, f"v{n}")
    put(store, "mine", "t", 0, "m0")
    put(store, "mine", "t", 1, "m1")
    batch = validate_key_import(
        [key_entry("mine", "t", [7]), key_entry("victim", "t", [8, 9])], max_batch=100
    )
    with pytest.raises(ImportScopeChange) as caught:
        store.import_keys(batch, "replace")
    assert caught.value.index == 1
    assert [(r["v"], r["revision"]) for r in store.get_many(["mine", "victim"])] == [
        (1, 2),
        (2, 3),
    ]
    outcome = store.import_keys(batch, "replace", allow_scope_change=True)
    assert outcome.replaced == 2
    mine, victim = store.get_many(["mine", "victim"])
    assert (mine["v"], mine["revision"]) == (7, 3)
    assert (victim["v"], victim["scope"], victim["revision"]) == (9, {"tenant": "t"}, 4)
    assert [r["revision"] for r in store.history("victim")["items"]] == [4, 1]
    with pytest.raises(RevisionMismatch):
        store.put_many(
            [{"key": "mine", "scope": {"tenant": "t"}, "v": 0}],
            idempotency_key="stale",
            ctx=CTX,
            expected_revisions={"mine": 2},
        )
    again = store.import_keys(batch, "replace")
    assert (again.written, again.skipped, again.replaced) == (0, 2, 0)
    assert [r["revision"] for r in store.get_many(["mine", "victim"])] == [3, 4]
