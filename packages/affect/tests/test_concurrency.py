"""Durability and concurrency settings, and two independent openers of one file
(what two processes do: separate connections, the file lock between them)."""

from __future__ import annotations

import threading

from bifrost.context import DispatchContext
from ratatoskr.affect import open_affect_store


def test_file_store_runs_in_wal_with_a_busy_timeout_and_full_sync(db_file: str) -> None:
    s = open_affect_store(db_file)
    with s.database.read() as conn:
        assert conn.execute("PRAGMA journal_mode").fetchall() == [("wal",)]
        assert int(conn.execute("PRAGMA busy_timeout").fetchall()[0][0]) >= 5000  # type: ignore[arg-type]
        assert conn.execute("PRAGMA synchronous").fetchall() == [(2,)]  # FULL
    s.close()


def test_two_openers_of_one_file_interleave_whole_batches(db_file: str) -> None:
    stores = [open_affect_store(db_file), open_affect_store(db_file)]
    errors: list[BaseException] = []

    def work(w: int) -> None:
        ctx = DispatchContext(actor=f"writer-{w}")
        try:
            for n in range(25):
                records = [{"key": f"shared-{j}", "scope": {}, "w": w, "n": n} for j in range(5)]
                stores[w].put_many(records, idempotency_key=f"{n}", ctx=ctx)
                page = stores[1 - w].history("shared-0", limit=1)["items"]
                assert page  # the other opener sees committed batches
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for s in stores:
        heads = s.get_many([f"shared-{j}" for j in range(5)])
        assert {r["revision"] for r in heads} == {50}
        # Every revision was written by one batch: the five keys agree at each one.
        histories = [s.history(f"shared-{j}", limit=50)["items"] for j in range(5)]
        for revs in zip(*histories, strict=True):
            assert len({(r["revision"], r["w"], r["n"]) for r in revs}) == 1
    for s in stores:
        s.close()
