"""The write grant of the conformance kit, for both planes: what a store shows through
the transport-free dispatch (the path every wire call takes) under tokens that grant
one tenant each.

- Two grants racing on one new id, from threads, many rounds: exactly one write
  succeeds, the other is ``Forbidden``, and the stored record is the winner's (a
  store that reads the scopes outside its write transaction lets both succeed).
- A malformed write is refused the same way whether its id exists under another
  tenant or not (validation of the whole batch comes before any grant decision), and
  nothing is written.

Mixed into :class:`~bifrost.consumer.testing.conformance.MemoryStoreConformance` and
:class:`~bifrost.consumer.testing.conformance.AffectStoreConformance`.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from bifrost.affect.dispatch import dispatch_affect_call
from bifrost.affect.protocol import AffectDataStore
from bifrost.consumer.testing.conformance._helpers import basis, chunk, ctx
from bifrost.errors import BifrostError, Forbidden, InvalidArguments
from bifrost.memory.dispatch import dispatch_memory_call
from bifrost.memory.protocol import MemoryDataStore

__all__ = ["RACE_ROUNDS", "AffectGrantTests", "MemoryGrantTests", "race"]

RACE_ROUNDS = 60
"""Rounds of :func:`race` each kit test runs (two writers per round)."""

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
