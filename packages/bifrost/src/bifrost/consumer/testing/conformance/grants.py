"""The write grant of the conformance kit, for both planes: what a store shows through
the transport-free dispatch (the path every wire call takes) under tokens that grant
one tenant each.

- Two grants racing on one new id, from threads, many rounds: exactly one write
  succeeds, the other is ``Forbidden``, and the stored record is the winner's (a
  store that reads the scopes outside its write transaction lets both succeed).
- A malformed write is refused the same way whether its id exists under another
  tenant or not (validation of the whole batch comes before any grant decision), and
  nothing is written.
- A delete racing another tenant's create, many rounds: tenant A writes and deletes
  one id over and over from :data:`ATTACKERS` threads while B writes it until
  acknowledged; B's acknowledged record must survive (a store that decides the
  delete's grant outside its delete transaction lets A erase it).
- An ``expected_revisions`` entry ≠ 0 gets the same answer, byte for byte, for an id
  another tenant holds and for an absent one (a record outside the grant is absent
  to the revision check), and nothing is written.

Mixed into :class:`~bifrost.consumer.testing.conformance.MemoryStoreConformance` and
:class:`~bifrost.consumer.testing.conformance.AffectStoreConformance`.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import pytest

from bifrost.affect.dispatch import dispatch_affect_call
from bifrost.affect.protocol import AffectDataStore
from bifrost.consumer.testing.conformance._helpers import basis, chunk, ctx
from bifrost.errors import BifrostError, Forbidden, InvalidArguments, render_error
from bifrost.memory.dispatch import dispatch_memory_call
from bifrost.memory.protocol import MemoryDataStore

__all__ = [
    "ATTACKERS",
    "DELETE_RACE_ROUNDS",
    "RACE_ROUNDS",
    "AffectGrantTests",
    "MemoryGrantTests",
    "delete_race",
    "race",
]

RACE_ROUNDS = 60
"""Rounds of :func:`race` each kit test runs (two writers per round)."""
DELETE_RACE_ROUNDS = 100
"""Rounds of :func:`delete_race` each kit test runs."""
ATTACKERS = 4
"""Threads of tenant A writing and deleting the raced id in :func:`delete_race`."""
_CREATE_ATTEMPTS = 5000

Outcome = dict[str, Any] | BifrostError


def _env(verb: str, key: str, **args: Any) -> dict[str, Any]:
    return {
        "wire_version": "0.6",
        "call_id": f"call-{key}",
        "verb": verb,
        "args": args,
        "idempotency_key": key,
    }


@contextmanager
def _eager_switching() -> Iterator[None]:
    """Threads switch every few microseconds (not every 5 ms): two writers interleave
    inside a write, where a race would be, rather than one running to its end."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def race(write: Callable[[int], Any]) -> tuple[Outcome, Outcome]:
    """``write(0)`` and ``write(1)`` from two threads released at once; what each
    returned or raised (a typed error; anything else is re-raised)."""
    gate = threading.Barrier(2)
    out: list[Any] = [None, None]

    def run(t: int) -> None:
        gate.wait()
        try:
            out[t] = write(t)
        except BifrostError as exc:
            out[t] = exc
        except BaseException as exc:  # pragma: no cover - surfaced below
            out[t] = exc

    threads = [threading.Thread(target=run, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for o in out:
        if isinstance(o, BaseException) and not isinstance(o, BifrostError):
            raise o
    return out[0], out[1]


def _one_winner(outcomes: tuple[Outcome, Outcome], round_: int) -> int:
    """The index of the writer that succeeded; the other must have been Forbidden."""
    ok = [i for i, o in enumerate(outcomes) if not isinstance(o, BaseException)]
    assert len(ok) == 1, f"round {round_}: {len(ok)} of 2 writers under different grants succeeded"
    loser = outcomes[1 - ok[0]]
    assert isinstance(loser, Forbidden), f"round {round_}: the loser got {loser!r}"
    return ok[0]


TENANTS = ("tenant-a", "tenant-b")


def _attack(
    write: Callable[[int, str, str], Any],
    delete: Callable[[str], Any],
    rid: str,
    stop: threading.Event,
    keys: Iterator[int],
) -> None:
    """Tenant A: write ``rid`` then delete it, over and over until ``stop``."""
    while not stop.is_set():
        with suppress(BifrostError):
            write(0, rid, f"{rid}-a-{next(keys)}")
        with suppress(BifrostError):
            delete(rid)


def delete_race(
    write: Callable[[int, str, str], Any],
    delete: Callable[[str], Any],
    owner: Callable[[str], str | None],
    rounds: int = DELETE_RACE_ROUNDS,
    prefix: str = "delete-race",
) -> int:
    """``rounds`` rounds, each on a new id: :data:`ATTACKERS` threads of tenant A
    (``write(0, id, key)`` then ``delete(id)``, errors ignored) over and over while B
    writes the id (``write(1, id, key)``, a fresh ``key`` each attempt) until it is
    acknowledged; then A stops, and ``owner(id)`` (the stored record's tenant) must be
    B's. Ids are ``{prefix}-{round}``. Returns the rounds in which B was acknowledged
    (at least half must be: the test cannot pass by never racing)."""
    keys = itertools.count()
    acked = 0
    for r in range(rounds):
        rid = f"{prefix}-{r}"
        stop = threading.Event()
        threads = [
            threading.Thread(target=_attack, args=(write, delete, rid, stop, keys))
            for _ in range(ATTACKERS)
        ]
        for th in threads:
            th.start()
        try:
            ok = False
            for attempt in range(_CREATE_ATTEMPTS):
                try:
                    write(1, rid, f"{rid}-b-{attempt}")
                except Forbidden:
                    continue
                ok = True
                break
        finally:
            stop.set()
            for th in threads:
                th.join()
        if ok:
            acked += 1
            held = owner(rid)
            assert held == TENANTS[1], (
                f"round {r}: tenant-b's acknowledged record is "
                f"{'gone' if held is None else 'held by ' + held} after tenant-a's deletes"
            )
    assert acked * 2 >= rounds, f"tenant-b was acknowledged in only {acked} of {rounds} rounds"
    return acked


def _wire_answer(write: Callable[[], Any], plane: str) -> str:
    """The response body a refused write gets on the wire (status and JSON), as text."""
    try:
        write()
    except BifrostError as exc:
        status, body = render_error(exc, plane=plane, call_id="probe")
        return json.dumps([status, body], sort_keys=True)
    raise AssertionError("the probe was written")


class MemoryGrantTests:
    """The write grant, memory plane (needs the kit's ``store`` fixture)."""

    def test_two_grants_racing_on_a_new_id_one_wins(self, store: MemoryDataStore) -> None:
        calls = [ctx(f"agent-{t}", {"tenant": t}, verb="upsert_many") for t in TENANTS]
        with _eager_switching():
            for r in range(RACE_ROUNDS):
                cid = f"race-{r}"

                def write(t: int, cid: str = cid) -> Any:
                    rec = chunk(cid, basis(t), {"tenant": TENANTS[t]}, content=TENANTS[t])
                    return dispatch_memory_call(
                        store, _env("upsert_many", f"k-{cid}-{t}", records=[rec]), calls[t]
                    )

                winner = _one_winner(race(write), r)
                got = store.get(cid)
                assert got is not None
                assert (got["scope"], got["content"], got["revision"]) == (
                    {"tenant": TENANTS[winner]},
                    TENANTS[winner],
                    1,
                )
                seen = dispatch_memory_call(
                    store, _env("get", f"g-{cid}", chunk_id=cid), calls[winner]
                )
                assert seen is not None and seen["content"] == TENANTS[winner]

    @pytest.mark.parametrize("exists", [False, True])
    def test_a_malformed_write_does_not_tell_whether_its_id_exists(
        self, store: MemoryDataStore, exists: bool
    ) -> None:
        owner = ctx("owner", verb="upsert_many")
        if exists:
            rec = chunk("probe", basis(0), {"tenant": "other"})
            dispatch_memory_call(store, _env("upsert_many", "seed", records=[rec]), owner)
        before = store.get("probe")
        prober = ctx("prober", {"tenant": "mine"}, verb="upsert_many")
        dim = store.health()["embedding_dim"]
        probes = [
            # A wrong dimension, and a valid record followed by a malformed one.
            [chunk("probe", [1.0] * (dim + 1), {"tenant": "mine"})],
            [chunk("probe", basis(0), {"tenant": "mine"}), {"id": "x", "scope": {}}],
            [chunk("probe", basis(0), {"tenant": "mine"}, revision=3)],
        ]
        messages = []
        for i, records in enumerate(probes):
            with pytest.raises(InvalidArguments) as err:
                dispatch_memory_call(store, _env("upsert_many", f"p{i}", records=records), prober)
            messages.append(str(err.value))
        assert messages == [
            f"record 0: embedding length {dim + 1} != {dim}",
            "record 1: missing embedding",
            "record 0: 'revision' is reserved (store-owned)",
        ]
        assert store.get("probe") == before
        assert store.get("x") is None

    def test_a_delete_racing_another_tenants_create_leaves_it(self, store: MemoryDataStore) -> None:
        calls = [ctx(f"agent-{t}", {"tenant": t}, verb="upsert_many") for t in TENANTS]
        deleter = ctx("agent-tenant-a", {"tenant": TENANTS[0]}, verb="delete_many")

        def write(t: int, cid: str, key: str) -> Any:
            rec = chunk(cid, basis(t), {"tenant": TENANTS[t]}, content=TENANTS[t])
            return dispatch_memory_call(store, _env("upsert_many", key, records=[rec]), calls[t])

        def delete(cid: str) -> Any:
            return dispatch_memory_call(store, _env("delete_many", "d", ids=[cid]), deleter)

        def owner(cid: str) -> str | None:
            got = store.get(cid)
            return None if got is None else str(got["scope"].get("tenant"))

        with _eager_switching():
            delete_race(write, delete, owner)

    def test_an_expected_revision_does_not_tell_whether_another_tenant_holds_the_id(
        self, store: MemoryDataStore
    ) -> None:
        prober = ctx("prober", {"tenant": "mine"}, verb="upsert_many")
        records = [chunk("held", basis(1), {"tenant": "mine"})]

        def probe(key: str, expected: dict[str, int]) -> Any:
            env = _env("upsert_many", key, records=records, expected_revisions=expected)
            return dispatch_memory_call(store, env, prober)

        absent = _wire_answer(lambda: probe("p-absent", {"held": 5}), "memory")
        assert store.get("held") is None
        owner = ctx("owner", {"tenant": "other"}, verb="upsert_many")
        rec = chunk("held", basis(0), {"tenant": "other"})
        dispatch_memory_call(store, _env("upsert_many", "seed", records=[rec]), owner)
        before = store.get("held")
        foreign = _wire_answer(lambda: probe("p-foreign", {"held": 5}), "memory")
        assert foreign == absent
        assert '"actual": 0' in absent and "memory.revision_mismatch" in absent
        # A write that would otherwise go ahead is refused for the grant.
        for i, expected in enumerate(({}, {"held": 0})):
            with pytest.raises(Forbidden):
                probe(f"p-write-{i}", expected)
        assert store.get("held") == before


class AffectGrantTests:
    """The write grant, affect plane (needs the kit's ``store`` fixture)."""

    def test_two_grants_racing_on_a_new_key_one_wins(self, store: AffectDataStore) -> None:
        calls = [ctx(f"agent-{t}", {"tenant": t}, plane="affect", verb="put_many") for t in TENANTS]
        with _eager_switching():
            for r in range(RACE_ROUNDS):
                key = f"race-{r}"

                def write(t: int, key: str = key) -> Any:
                    rec = {"key": key, "scope": {"tenant": TENANTS[t]}, "by": TENANTS[t]}
                    return dispatch_affect_call(
                        store, _env("put_many", f"k-{key}-{t}", records=[rec]), calls[t]
                    )

                winner = _one_winner(race(write), r)
                got = store.get(key)
                assert got is not None
                assert (got["scope"], got["by"], got["revision"]) == (
                    {"tenant": TENANTS[winner]},
                    TENANTS[winner],
                    1,
                )
                assert [h["by"] for h in store.history(key)["items"]] == [TENANTS[winner]]

    @pytest.mark.parametrize("exists", [False, True])
    def test_a_malformed_write_does_not_tell_whether_its_key_exists(
        self, store: AffectDataStore, exists: bool
    ) -> None:
        owner = ctx("owner", plane="affect", verb="put_many")
        if exists:
            rec = {"key": "probe", "scope": {"tenant": "other"}, "v": 1}
            dispatch_affect_call(store, _env("put_many", "seed", records=[rec]), owner)
        before = store.history("probe")
        prober = ctx("prober", {"tenant": "mine"}, plane="affect", verb="put_many")
        probes = [
            [{"key": "probe", "scope": {"tenant": "mine"}, "revision": 1}],
            [{"key": "probe", "scope": {"tenant": "mine"}, "recorded_at": "x"}],
            [{"key": "probe", "scope": {"tenant": "mine"}}, {"key": "x"}],
        ]
        messages = []
        for i, records in enumerate(probes):
            with pytest.raises(InvalidArguments) as err:
                dispatch_affect_call(store, _env("put_many", f"p{i}", records=records), prober)
            messages.append(str(err.value))
        assert messages == [
            "record 0: 'revision' is reserved (store-owned)",
            "record 0: 'recorded_at' is reserved (store-owned)",
            "record 1: missing scope (use {} for unscoped)",
        ]
        assert store.history("probe") == before
        assert store.get("x") is None

    def test_a_delete_racing_another_tenants_create_leaves_it(self, store: AffectDataStore) -> None:
        calls = [ctx(f"agent-{t}", {"tenant": t}, plane="affect", verb="put_many") for t in TENANTS]
        deleter = ctx("agent-tenant-a", {"tenant": TENANTS[0]}, plane="affect", verb="delete_many")

        def write(t: int, key: str, idem: str) -> Any:
            rec = {"key": key, "scope": {"tenant": TENANTS[t]}, "by": TENANTS[t]}
            return dispatch_affect_call(store, _env("put_many", idem, records=[rec]), calls[t])

        def delete(key: str) -> Any:
            return dispatch_affect_call(store, _env("delete_many", "d", keys=[key]), deleter)

        def owner(key: str) -> str | None:
            got = store.get(key)
            return None if got is None else str(got["scope"].get("tenant"))

        with _eager_switching():
            delete_race(write, delete, owner)

    def test_an_expected_revision_does_not_tell_whether_another_tenant_holds_the_key(
        self, store: AffectDataStore
    ) -> None:
        prober = ctx("prober", {"tenant": "mine"}, plane="affect", verb="put_many")
        records = [{"key": "held", "scope": {"tenant": "mine"}, "v": 2}]

        def probe(idem: str, expected: dict[str, int]) -> Any:
            env = _env("put_many", idem, records=records, expected_revisions=expected)
            return dispatch_affect_call(store, env, prober)

        absent = _wire_answer(lambda: probe("p-absent", {"held": 5}), "affect")
        assert store.get("held") is None
        owner = ctx("owner", {"tenant": "other"}, plane="affect", verb="put_many")
        rec = {"key": "held", "scope": {"tenant": "other"}, "v": 1}
        dispatch_affect_call(store, _env("put_many", "seed", records=[rec]), owner)
        before = store.history("held")
        foreign = _wire_answer(lambda: probe("p-foreign", {"held": 5}), "affect")
        assert foreign == absent
        assert '"actual": 0' in absent and "affect.revision_mismatch" in absent
        for i, expected in enumerate(({}, {"held": 0})):
            with pytest.raises(Forbidden):
                probe(f"p-write-{i}", expected)
        assert store.history("held") == before
