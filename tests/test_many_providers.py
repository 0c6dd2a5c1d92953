"""Many stateless providers on one PostgreSQL, over real HTTP.

Two ``ratatoskr serve`` processes (all planes, ``--workers 2`` each: four worker
processes) with memory and affect on one database by ``postgresql://`` DSN; VMP
stays on SQLite, a file per provider as on two hosts. Shown through
``bifrost.client`` with per-dispatch tokens:

- a write through one provider is read (get, get_many, search, history) through
  the other, on both planes;
- a token used at one is refused at the other ("token replayed"), on both
  planes and in both directions: the replay cache is the database's;
- concurrent writers spread over both providers on one idempotency key give one
  write and replays; on one new id with expected revision 0, one success and
  RevisionMismatch for the rest;
- SIGKILL of a provider's whole process group (supervisor and workers) under
  write load loses no acknowledged ``upsert_many`` batch, leaves no partial batch,
  no lock held, and a retried unacknowledged batch is a replay exactly when it had
  committed (ledger and data commit together).
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest
from psycopg import sql

from bifrost.client import BifrostClient
from bifrost.errors import BifrostError, RevisionMismatch
from ratatoskr.provider.testing import ServerProcess, start_serve

from .conftest import KEY
from .test_postgres_provider import pg_dsn  # noqa: F401 - the session's server, shared
from .test_single_use import GRANT, Captured, refused_as_replay

pytestmark = pytest.mark.slow
DIM = 8
RACERS = 8  # four per provider, two per worker on average


@pytest.fixture(scope="module")
def database(pg_dsn: str) -> Iterator[str]:  # noqa: F811 - pg_dsn is the imported fixture
    """A postgresql:// DSN of a database of this module's own, dropped afterwards."""
    name = f"many_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    parts = urlsplit(pg_dsn)
    yield urlunsplit(("postgresql", parts.netloc, f"/{name}", parts.query, ""))
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(drop)


def provider(database: str, home: Path) -> ServerProcess:
    """``ratatoskr serve --workers 2`` on ``database`` (the launcher gives it a process
    group of its own, so the whole provider can be SIGKILLed at once); VMP on a file
    in ``home``."""
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "RATATOSKR_MEMORY_DB": database,
        "RATATOSKR_AFFECT_DB": database,
        "RATATOSKR_VMP_DB": str(home / "vmp.db"),
        "RATATOSKR_VMP_API_KEY": "many-vmp-key-0123456789",
        "RATATOSKR_MEMORY_EMBEDDING_DIM": str(DIM),
        "RATATOSKR_HEIMDALL_KEY": KEY,
        "RATATOSKR_PORT": "0",
    }
    return start_serve(["serve", "--workers", "2"], env, home, timeout=120)


def kill_group(server: ServerProcess) -> None:
    """SIGKILL the supervisor and its workers at once: nothing gets to clean up."""
    if server.proc.poll() is None:
        os.killpg(server.pid, signal.SIGKILL)
    server.proc.wait(30)


@pytest.fixture(scope="module")
def pair(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The base URLs of two providers on ``database``."""
    home = tmp_path_factory.mktemp("many")
    servers: list[ServerProcess] = []
    try:
        for name in ("one", "two"):
            servers.append(provider(database, home / name))
        yield servers[0].base_url, servers[1].base_url
    finally:
        for s in servers:
            s.close()


def client(base: str, plane: str) -> BifrostClient:
    return BifrostClient(f"{base}/{plane}", KEY.encode(), actor="agent", scope=GRANT, plane=plane)


def emb(i: int) -> list[float]:
    return [1.0 if d == i % DIM else 0.1 * ((i // DIM) % 7 + 1) for d in range(DIM)]


def chunk(chunk_id: str, i: int, content: str) -> dict[str, Any]:
    return {"id": chunk_id, "embedding": emb(i), "scope": GRANT, "content": content}


def test_a_write_through_one_is_read_through_the_other(pair: tuple[str, str]) -> None:
    one, two = pair
    m1, m2 = client(one, "memory"), client(two, "memory")
    a1, a2 = client(one, "affect"), client(two, "affect")
    tag = uuid.uuid4().hex[:8]
    ids = [f"{tag}-{i}" for i in range(5)]
    put = m1.upsert_many(
        [chunk(c, i, f"via one {i}") for i, c in enumerate(ids)], idempotency_key=f"{tag}-w"
    )
    assert put == {"upserted": 5, "replayed": False}
    got = m2.get_many(ids)
    assert [(g["id"], g["content"], g["revision"]) for g in got] == [
        (c, f"via one {i}", 1) for i, c in enumerate(ids)
    ]
    hits = m2.search(emb(3), top_k=1)
    assert hits[0]["chunk_id"] == ids[3]
    # Back the other way: an update at two is revision 2 at one.
    m2.upsert_many([chunk(ids[0], 0, "via two")], idempotency_key=f"{tag}-u")
    again = m1.get(ids[0])
    assert again is not None and (again["content"], again["revision"]) == ("via two", 2)

    a2.put_many([{"key": f"{tag}-mood", "scope": GRANT, "v": 1}], idempotency_key=f"{tag}-a1")
    a1.put_many([{"key": f"{tag}-mood", "scope": GRANT, "v": 2}], idempotency_key=f"{tag}-a2")
    state = a2.get(f"{tag}-mood")
    assert state is not None and (state["v"], state["revision"]) == (2, 2)
    assert [i["revision"] for i in a2.history(f"{tag}-mood")["items"]] == [2, 1]
    assert m1.delete_many([ids[4]]) == {"deleted": 1}
    assert m2.get(ids[4]) is None


def test_a_token_used_at_one_is_refused_at_the_other(pair: tuple[str, str]) -> None:
    one, two = pair
    tag = uuid.uuid4().hex[:8]
    writes = [
        Captured("memory", "upsert_many", {"records": [chunk(f"{tag}-t", 1, "once")]}, f"{tag}-k"),
        Captured(
            "affect", "put_many", {"records": [{"key": f"{tag}-a", "scope": GRANT, "v": 1}]}, "k"
        ),
        Captured("memory", "search", {"vector": emb(1), "top_k": 3}),
    ]
    for n, captured in enumerate(writes):
        first, second = (one, two) if n % 2 == 0 else (two, one)
        assert captured.send(f"{first}/{captured.plane}").status_code == 200
        for _ in range(4):  # fresh connections: whichever worker of the other takes it
            refused_as_replay(captured.send(f"{second}/{captured.plane}"))
        refused_as_replay(captured.send(f"{first}/{captured.plane}"))
    got = client(two, "memory").get(f"{tag}-t")
    assert got is not None and got["revision"] == 1  # the replays wrote nothing
    state = client(one, "affect").get(f"{tag}-a")
    assert state is not None and state["revision"] == 1


def race(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run every call at once (released together by a barrier); each result or the
    exception it raised."""
    barrier = threading.Barrier(len(calls))

    def run(call: Callable[[], Any]) -> Any:
        barrier.wait(30)
        try:
            return call()
        except BifrostError as exc:
            return exc

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


def write_verb(c: BifrostClient) -> str:
    return "upsert_many" if c.plane == "memory" else "put_many"


def same_key_write(c: BifrostClient, records: list[dict[str, Any]], key: str) -> Any:
    return c.call(write_verb(c), {"records": records}, idempotency_key=key)


def create_new(c: BifrostClient, new: str, n: int, key: str) -> Any:
    """Writer ``n`` creates ``new`` (expected revision 0) with a record of its own."""
    if c.plane == "memory":
        record = chunk(new, n, f"writer {n}")
    else:
        record = {"key": new, "scope": GRANT, "writer": n}
    args = {"records": [record], "expected_revisions": {new: 0}}
    return c.call(write_verb(c), args, idempotency_key=key)


@pytest.mark.parametrize("plane", ["memory", "affect"])
def test_writers_on_one_idempotency_key_across_providers_write_once(
    pair: tuple[str, str], plane: str
) -> None:
    clients = [client(pair[n % 2], plane) for n in range(RACERS)]
    for round_ in range(3):
        tag = f"{uuid.uuid4().hex[:8]}-{round_}"
        if plane == "memory":
            records = [chunk(f"{tag}-c", 1, "same"), chunk(f"{tag}-d", 2, "same")]
            count = "upserted"
        else:
            records = [{"key": f"{tag}-c", "scope": GRANT, "v": 1}]
            count = "written"
        results = race([partial(same_key_write, c, records, tag) for c in clients])
        assert all(isinstance(r, dict) for r in results), results
        assert sorted(r["replayed"] for r in results) == [False] + [True] * (RACERS - 1)
        assert {r[count] for r in results} == {len(records)}
        got = clients[1].get(f"{tag}-c")
        assert got is not None and got["revision"] == 1  # one write, not eight


@pytest.mark.parametrize("plane", ["memory", "affect"])
def test_writers_on_one_new_id_with_revision_0_across_providers_one_wins(
    pair: tuple[str, str], plane: str
) -> None:
    clients = [client(pair[n % 2], plane) for n in range(RACERS)]
    for round_ in range(3):
        tag = f"{uuid.uuid4().hex[:8]}-{round_}"
        new = f"{tag}-new"
        results = race(
            [partial(create_new, c, new, n, f"{tag}-{n}") for n, c in enumerate(clients)]
        )
        winners = [n for n, r in enumerate(results) if isinstance(r, dict)]
        assert len(winners) == 1, results
        losers = [r for r in results if not isinstance(r, dict)]
        assert all(isinstance(r, RevisionMismatch) for r in losers), losers
        assert all(r.details == {"id": new, "expected": 0, "actual": 1} for r in losers), [
            r.details for r in losers
        ]
        got = clients[0].get(new)
        assert got is not None and got["revision"] == 1
        if plane == "memory":  # the stored record is the winner's
            assert got["content"] == f"writer {winners[0]}"
        else:
            assert got["writer"] == winners[0]


@dataclass
class Writer:
    """One client thread writing batches until told to stop: what was acknowledged,
    and what was sent without an answer (the kill may or may not have let it commit)."""

    base: str
    name: str
    batch: int
    acked: list[int] = field(default_factory=list)
    unknown: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def ids(self, b: int) -> list[str]:
        return [f"{self.name}-b{b}-{i}" for i in range(self.batch)]

    def key(self, b: int) -> str:
        return f"{self.name}-b{b}"

    def records(self, b: int) -> list[dict[str, Any]]:
        return [chunk(c, b + i, f"{c} body") for i, c in enumerate(self.ids(b))]

    def run(self, stop: threading.Event, after_error: int) -> None:
        """Write until ``stop``; after the first transport error, at most ``after_error``
        more attempts (a killed provider answers nothing more)."""
        http = httpx.Client(base_url=f"{self.base}/memory", timeout=15)
        c = BifrostClient(
            "", KEY.encode(), actor="agent", scope=GRANT, plane="memory", http_client=http
        )
        b = 0
        failures = 0
        try:
            while not stop.is_set() and failures <= after_error:
                try:
                    result = c.upsert_many(self.records(b), idempotency_key=self.key(b))
                except (httpx.HTTPError, BifrostError) as exc:
                    self.unknown.append(b)
                    self.errors.append(type(exc).__name__)
                    failures += 1
                    time.sleep(0.01)
                else:
                    if result == {"upserted": self.batch, "replayed": False}:
                        self.acked.append(b)
                    else:
                        self.errors.append(f"unexpected result {result}")
                        return
                b += 1
        finally:
            http.close()


def test_sigkill_of_one_provider_under_write_load_loses_no_acknowledged_batch(
    pair: tuple[str, str], database: str, tmp_path: Path
) -> None:
    _, survivor = pair
    victim = provider(database, tmp_path / "victim")
    stop = threading.Event()
    tag = uuid.uuid4().hex[:6]
    doomed = [Writer(victim.base_url, f"{tag}-v{n}", batch=40) for n in range(4)]
    steady = Writer(survivor, f"{tag}-s", batch=40)
    threads = [threading.Thread(target=w.run, args=(stop, 3)) for w in doomed]
    threads.append(threading.Thread(target=steady.run, args=(stop, 0)))
    try:
        for t in threads:
            t.start()
        # Kill once the load is real: every writer has had batches acknowledged.
        deadline = time.monotonic() + 60
        while min(len(w.acked) for w in doomed) < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert min(len(w.acked) for w in doomed) >= 5, [w.errors for w in doomed]
        kill_group(victim)
        # The survivor's writer goes on past the kill (a few more batches acknowledged)
        # while each doomed writer has a batch cut off.
        at_kill = len(steady.acked)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
            len(steady.acked) < at_kill + 3 or not all(w.unknown for w in doomed)
        ):
            time.sleep(0.02)
        stop.set()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
    finally:
        stop.set()
        victim.close()

    assert steady.errors == [] and len(steady.acked) >= at_kill + 3  # it never noticed
    # The doomed writers were cut off (an answer already on its way when the kill
    # came may still have been read: it counts as acknowledged, and is checked).
    assert all(w.unknown for w in doomed)

    reader = client(survivor, "memory")
    for w in [*doomed, steady]:
        for b in w.acked:  # every acknowledged batch, whole and as written
            got = reader.get_many(w.ids(b))
            assert [(g["id"], g["content"], g["revision"]) for g in got] == [
                (c, f"{c} body", 1) for c in w.ids(b)
            ], (w.name, b)
        for b in w.unknown:  # all or nothing, then the client's retry settles it
            present = len(reader.get_many(w.ids(b)))
            assert present in (0, w.batch), (w.name, b, present)
            # A retry at the survivor: a replay exactly when the batch had committed
            # (ledger entry and rows are one transaction), a write otherwise. It
            # returns at all: the killed worker's transaction holds no row lock.
            retry = reader.upsert_many(w.records(b), idempotency_key=w.key(b))
            assert retry == {"upserted": w.batch, "replayed": present == w.batch}
            assert len(reader.get_many(w.ids(b))) == w.batch
