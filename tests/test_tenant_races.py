"""Tenants cannot write over each other, over real HTTP (issue 22, findings 1 and 7).

Tenants A and B, each with a token granting only its own tenant, write the same
*new* id at the same moment, round after round: exactly one is acknowledged (200)
and the other refused (403), and the acknowledged record stays its writer's. Shown
against ``ratatoskr serve`` with one worker and with two (SQLite files shared by
the workers), and against two providers on one PostgreSQL database (four workers),
on the memory and affect planes. Before the grant was decided inside the write's
transaction, both writers were acknowledged in most rounds.

A malformed write (a wrong-dimension embedding; affect: a reserved field) is
refused with the same 400 whether its id exists under another tenant or not, and a
write expecting revision 5 of an id gets the same 409 (actual 0) whether another
tenant holds it or nobody does.

Tenant A writing and deleting one id over and over (four threads) while B writes it
until acknowledged: B's acknowledged record survives, round after round (the
conformance kit's :func:`~bifrost.consumer.testing.conformance.grants.delete_race`
over the wire, against ``serve`` with 1 and 2 workers). Before the delete decided
the grant inside its transaction, A erased B's acknowledged record in about 40% of
the rounds. Through two PostgreSQL providers the old window was hit too rarely over
HTTP (once in 93-200 rounds) for a test that must fail on it: the conformance kit's
delete race on the PostgreSQL stores covers that backend (it fails there by round 30).
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from bifrost.client import BifrostClient
from bifrost.consumer.testing.conformance.grants import delete_race
from bifrost.errors import BifrostError, Forbidden, InvalidArguments, RevisionMismatch
from ratatoskr.provider.testing import ServerProcess

from .conftest import KEY, loopback_transport, server_settings, start_server
from .test_many_providers import database, provider  # noqa: F401 - the module's database
from .test_postgres_provider import pg_dsn  # noqa: F401 - the session's server, shared

pytestmark = pytest.mark.slow
ROUNDS = 50
DELETE_ROUNDS = 20
DIM = 8
TENANTS = ("tenant-a", "tenant-b")


def _client(base: str, plane: str, tenant: str) -> BifrostClient:
    return BifrostClient(
        f"{base}/{plane}",
        KEY.encode(),
        actor=f"agent-{tenant}",
        scope={"tenant": tenant},
        plane=plane,
        transport=loopback_transport(),
    )


def _record(plane: str, rid: str, t: int) -> dict[str, Any]:
    scope = {"tenant": TENANTS[t]}
    if plane == "memory":
        emb = [1.0 if d == t else 0.0 for d in range(DIM)]
        return {"id": rid, "embedding": emb, "scope": scope, "content": TENANTS[t]}
    return {"key": rid, "scope": scope, "content": TENANTS[t]}


def _write(c: BifrostClient, records: list[dict[str, Any]]) -> Any:
    verb = "upsert_many" if c.plane == "memory" else "put_many"
    return c.call(verb, {"records": records}, idempotency_key=str(uuid.uuid4()))


def _race(calls: list[Callable[[], Any]]) -> list[Any]:
    barrier = threading.Barrier(len(calls))

    def run(call: Callable[[], Any]) -> Any:
        barrier.wait(30)
        try:
            return call()
        except BifrostError as exc:
            return exc

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


def race_rounds(bases: tuple[str, str], plane: str) -> None:
    """:data:`ROUNDS` rounds of A (through ``bases[0]``) and B (through ``bases[1]``)
    creating one new id each round."""
    clients = [_client(bases[t], plane, TENANTS[t]) for t in range(2)]
    tag = uuid.uuid4().hex[:8]
    both_ok = 0
    for r in range(ROUNDS):
        rid = f"{tag}-{r}"
        outcomes = _race(
            [functools.partial(_write, clients[t], [_record(plane, rid, t)]) for t in (0, 1)]
        )
        ok = [t for t, o in enumerate(outcomes) if not isinstance(o, BaseException)]
        both_ok += len(ok) == 2
        assert len(ok) == 1, f"round {r}: {outcomes!r}"
        winner, loser = ok[0], 1 - ok[0]
        refused = outcomes[loser]
        assert isinstance(refused, Forbidden) and refused.status == 403, refused
        mine = clients[winner].get(rid)
        assert mine is not None and mine["content"] == TENANTS[winner]
        assert mine["scope"] == {"tenant": TENANTS[winner]} and mine["revision"] == 1
        assert clients[loser].get(rid) is None
    assert both_ok == 0


def malformed_probe(base: str, plane: str) -> None:
    """The same 400 for a malformed write of an id that exists under another tenant
    and of one that does not; nothing written."""
    owner, prober = (_client(base, plane, t) for t in TENANTS)
    tag = uuid.uuid4().hex[:8]
    taken, free = f"{tag}-taken", f"{tag}-free"
    _write(owner, [_record(plane, taken, 0)])
    answers = []
    for rid in (taken, free):
        bad = _record(plane, rid, 1)
        if plane == "memory":
            bad["embedding"] = [1.0] * (DIM + 1)
        else:
            bad["revision"] = 7
        with pytest.raises(InvalidArguments) as err:
            _write(prober, [bad])
        answers.append((err.value.status, str(err.value)))
    assert answers[0] == answers[1]
    assert answers[0][0] == 400
    got = owner.get(taken)
    assert got is not None and (got["content"], got["revision"]) == (TENANTS[0], 1)
    assert owner.get(free) is None and prober.get(free) is None


def delete_race_rounds(bases: tuple[str, str], plane: str) -> None:
    """:data:`DELETE_ROUNDS` rounds of A (through ``bases[0]``) writing and deleting one
    id while B (through ``bases[1]``) creates it: B's acknowledged record survives."""
    clients = [_client(bases[t], plane, TENANTS[t]) for t in range(2)]
    verb = "upsert_many" if plane == "memory" else "put_many"

    def write(t: int, rid: str, key: str) -> Any:
        return clients[t].call(verb, {"records": [_record(plane, rid, t)]}, idempotency_key=key)

    def owner(rid: str) -> str | None:
        got = clients[1].get(rid)  # None when gone (or held by A)
        return None if got is None else str(got["scope"]["tenant"])

    delete_race(
        write,
        lambda rid: clients[0].delete_many([rid]),
        owner,
        rounds=DELETE_ROUNDS,
        prefix=f"del-{uuid.uuid4().hex[:8]}",
    )


def revision_probe(base: str, plane: str) -> None:
    """A write expecting revision 5 gets the same 409 (actual 0) for an id another
    tenant holds and for an absent one; nothing written."""
    owner, prober = (_client(base, plane, t) for t in TENANTS)
    tag = uuid.uuid4().hex[:8]
    held = f"{tag}-held"
    answers = []
    for taken in (False, True):
        if taken:
            _write(owner, [_record(plane, held, 0)])
        verb = "upsert_many" if plane == "memory" else "put_many"
        args = {"records": [_record(plane, held, 1)], "expected_revisions": {held: 5}}
        with pytest.raises(RevisionMismatch) as err:
            prober.call(verb, args, idempotency_key=str(uuid.uuid4()))
        e = err.value
        answers.append((e.status, e.wire_code(), str(e), e.details))
    assert answers[0] == answers[1]
    assert answers[0][0] == 409 and answers[0][3] == {"id": held, "expected": 5, "actual": 0}
    got = owner.get(held)
    assert got is not None and (got["content"], got["revision"]) == (TENANTS[0], 1)


@pytest.fixture(scope="module", params=[1, 2], ids=["1-worker", "2-workers"])
def sqlite_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """One provider per worker count for the module's four tests: each test writes only
    ids of its own (a fresh uuid tag), so none needs a fresh database."""
    home = tmp_path_factory.mktemp("sqlite-races")
    server = start_server(["serve", "--workers", str(request.param)], server_settings(home), home)
    try:
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("plane", ["memory", "affect"])
def test_two_tenants_racing_on_one_new_id_over_sqlite(
    sqlite_server: ServerProcess, plane: str
) -> None:
    base = sqlite_server.base_url
    race_rounds((base, base), plane)
    malformed_probe(base, plane)
    revision_probe(base, plane)


@pytest.mark.parametrize("plane", ["memory", "affect"])
def test_a_tenant_deleting_while_another_creates_over_sqlite(
    sqlite_server: ServerProcess, plane: str
) -> None:
    base = sqlite_server.base_url
    delete_race_rounds((base, base), plane)


@pytest.fixture(scope="module")
def providers(
    database: str,  # noqa: F811 - the imported fixture
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, str]]:
    home = tmp_path_factory.mktemp("races")
    servers: list[ServerProcess] = []
    try:
        for name in ("one", "two"):
            servers.append(provider(database, home / name))
        yield servers[0].base_url, servers[1].base_url
    finally:
        for s in servers:
            s.close()


@pytest.mark.parametrize("plane", ["memory", "affect"])
def test_two_tenants_racing_on_one_new_id_through_two_postgres_providers(
    providers: tuple[str, str], plane: str
) -> None:
    race_rounds(providers, plane)
    malformed_probe(providers[1], plane)
    revision_probe(providers[0], plane)
