"""Puts sharing one COMMIT (ratatoskr.sqlite.group): each keeps its own atomicity,
idempotency, revision, grant and quota checks, and its history rows."""

from __future__ import annotations

import functools
import random
import threading
from collections.abc import Callable
from typing import Any

from bifrost.context import DispatchContext
from bifrost.errors import Forbidden, IdempotencyConflict, QuotaExceeded, RevisionMismatch
from bifrost.quota import affect_quota
from ratatoskr.affect import RatatoskrAffectStore, open_affect_store
from ratatoskr.sqlite.grouptest import run_grouped

from .conftest import rec

CTX = DispatchContext(actor="agent-1")


def put(
    store: RatatoskrAffectStore,
    records: list[dict[str, Any]],
    key: str,
    ctx: DispatchContext = CTX,
    **kw: Any,
) -> Callable[[], Any]:
    return functools.partial(store.put_many, records, idempotency_key=key, ctx=ctx, **kw)


def state(store: RatatoskrAffectStore) -> dict[str, tuple[int, int]]:
    """Each key's revision and history length."""
    with store.database.read() as conn:
        return {
            str(k): (int(r), int(n))
            for k, r, n in conn.execute(
                "SELECT c.key, c.revision, (SELECT count(*) FROM affect_history h"
                " WHERE h.key_id = c.key_id) FROM affect_current c"
            )
        }


def test_one_failing_batch_leaves_the_rest_of_its_group_committed(db_file: str) -> None:
    store = open_affect_store(db_file, quota=affect_quota(5, 0))
    try:
        store.put_many([rec("old")], idempotency_key="seed", ctx=CTX)
        store.put_many(
            [rec("theirs", scope={"tenant": "t2"})],
            idempotency_key="seed2",
            ctx=DispatchContext(actor="agent-2", scope={"tenant": "t2"}),
        )
        t1 = DispatchContext(actor="agent-1", scope={"tenant": "t1"})
        out = run_grouped(
            store.database,
            [
                put(store, [rec("a")], "k-a"),
                put(store, [rec("r"), rec("old")], "k-r", expected_revisions={"old": 3}),
                put(store, [rec("g"), rec("theirs")], "k-g", ctx=t1),  # stored under t2
                put(store, [rec("c")], "k-a"),  # the key of the first batch, another body
                put(store, [rec(f"q{i}") for i in range(4)], "k-q"),  # t1: 2 + 4 > 5 keys
                put(store, [rec("old", valence=0.5)], "k-old", expected_revisions={"old": 1}),
                put(store, [rec("a")], "k-a"),  # a replay of the first batch
            ],
        )
        assert out[0] == {"written": 1, "replayed": False}
        assert isinstance(out[1], RevisionMismatch)
        assert isinstance(out[2], Forbidden)
        assert isinstance(out[3], IdempotencyConflict)
        assert isinstance(out[4], QuotaExceeded)
        assert out[5] == {"written": 1, "replayed": False}
        assert out[6] == {"written": 1, "replayed": True}
        assert state(store) == {"old": (2, 2), "theirs": (1, 1), "a": (1, 1)}
    finally:
        store.close()


def test_revisions_of_one_key_written_twice_in_a_group(db_file: str) -> None:
    store = open_affect_store(db_file)
    try:
        out = run_grouped(
            store.database,
            [
                put(store, [rec("x", n=1)], "w1", expected_revisions={"x": 0}),
                put(store, [rec("x", n=2)], "w2", expected_revisions={"x": 1}),
                put(store, [rec("x", n=3)], "w3", expected_revisions={"x": 1}),  # stale
            ],
        )
        assert out[:2] == [{"written": 1, "replayed": False}] * 2
        assert isinstance(out[2], RevisionMismatch)
        got = store.get("x")
        assert got is not None and got["n"] == 2 and got["revision"] == 2
        assert [r["n"] for r in store.history("x", limit=10)["items"]] == [2, 1]
    finally:
        store.close()


def test_eight_writers_end_where_a_serial_run_ends(db_file: str) -> None:
    store = open_affect_store(db_file)
    plan = [
        [(f"t{t}-{i}", [f"k{(t * 5 + i * 3 + j) % 30}" for j in range(4)]) for i in range(25)]
        for t in range(8)
    ]
    errors: list[BaseException] = []

    def writer(t: int) -> None:
        rng = random.Random(t)
        try:
            for key, keys in plan[t]:
                recs = [rec(k, by=key) for k in keys]
                assert store.put_many(recs, idempotency_key=key, ctx=CTX) == {
                    "written": 4,
                    "replayed": False,
                }
                if rng.random() < 0.3:  # a retry of the same call
                    again = store.put_many(recs, idempotency_key=key, ctx=CTX)
                    assert again == {"written": 4, "replayed": True}
        except BaseException as exc:  # reported below
            errors.append(exc)

    try:
        threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert errors == []
        want: dict[str, int] = {}
        for batches in plan:
            for _key, keys in batches:
                for k in keys:
                    want[k] = want.get(k, 0) + 1
        assert state(store) == {k: (n, n) for k, n in want.items()}
        group = store.database.group
        assert group is not None and group.batches >= 200
    finally:
        store.close()
