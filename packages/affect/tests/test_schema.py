"""Migrations: a schema v1 file (made by v1's statements) upgrades in place at open
(migration 2 keeps each record once) and answers every read as v1 did — every key,
revision, record, recorded_at, scope and listing order; a failed or killed upgrade
leaves the v1 file whole; v1 code refuses a v2 file."""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from bifrost.context import DispatchContext
from bifrost.scope import matches_scope
from ratatoskr.affect import SqliteAffectStore, open_affect_store
from ratatoskr.affect.schema import MIGRATIONS
from ratatoskr.sqlite import SchemaTooNew, StorageCorrupt
from ratatoskr.sqlite.crashtest import FixedDelay, kill_mid_stream

from .invariants import check_affect_file
from .v1_file import ACTOR, V1Writer, open_v1, v1_view

CTX = DispatchContext(actor=ACTOR)
LATEST = len(MIGRATIONS)
WORKER = Path(__file__).with_name("migrate_worker.py")
ODD_KEYS = ["ключ/α", "a\x00b", "a", "\U0001f600", "\uffff", "é", "B", "~"]


def rec(key: str, rng: random.Random, n: int, *, big: bool = False) -> dict[str, Any]:
    tenant = f"t{rng.randrange(3)}"
    scope = (
        {"tenant": tenant} if rng.random() < 0.3 else {"tenant": tenant, "end_user": f"u{n % 4}"}
    )
    pad = "x" * (9000 if big else rng.randrange(0, 400))  # 9 KB: overflow pages
    return {"key": key, "scope": scope, "n": n, "pad": pad, "nested": {"v": [n, None, 0.5]}}


def build_v1(path: str, *, keys: int = 400, rounds: int = 4, seed: int = 7) -> list[dict[str, Any]]:
    """A v1 file from v1's own statements: every key written, then rounds of new
    revisions (scopes moving), deletions (the newest rows among them, so v1's rowids
    were used again) and keys written anew. Returns the first batch, which the ledger
    holds under idempotency key ``b0``."""
    rng = random.Random(seed)
    names = [f"k{i:04d}" for i in range(keys)] + ODD_KEYS
    w = V1Writer(path)
    first = [rec(k, rng, 0, big=i % 97 == 0) for i, k in enumerate(names[:50])]
    w.put(first, "b0")
    for start in range(50, len(names), 50):
        w.put([rec(k, rng, 0) for k in names[start : start + 50]], f"b{start}")
    live = set(names)
    for n in range(1, rounds + 1):
        chosen = rng.sample(sorted(live), len(live) // 2)
        for start in range(0, len(chosen), 60):
            w.put([rec(k, rng, n) for k in chosen[start : start + 60]])
        gone = rng.sample(sorted(live), 20) + chosen[-5:]  # the last rows written too
        w.delete(gone)
        live -= set(gone)
        back = [k for k in gone[:8] if k not in live]
        w.put([rec(k, rng, n) for k in back])
        live |= set(back)
    w.close()
    return first


def history_rows(path: str) -> dict[tuple[str, int], int]:
    """``(key, revision) → rowid`` of a v1 file's history."""
    conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return {
            (str(k), int(r)): int(i)
            for i, k, r in conn.execute("SELECT rowid, key, revision FROM affect_history")
        }
    finally:
        conn.close()


def dump(path: str) -> list[list[tuple[Any, ...]]]:
    """Schema text and every row of every table of the file (with its rowid, where
    the table has one), sorted."""
    conn = apsw.Connection(path)
    try:
        out = [[tuple(r) for r in conn.execute("SELECT sql FROM sqlite_schema ORDER BY name")]]
        for (table,) in conn.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name"
        ).fetchall():
            try:
                rows = conn.execute(f"SELECT rowid, * FROM {table}").fetchall()
            except apsw.SQLError:  # WITHOUT ROWID
                rows = conn.execute(f"SELECT * FROM {table}").fetchall()
            out.append(sorted((tuple(r) for r in rows), key=repr))
        return out
    finally:
        conn.close()


def schema_sql(path: str) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(path)
    try:
        return [
            tuple(r)
            for r in conn.execute(
                "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type, name"
            )
        ]
    finally:
        conn.close()


def page_keys(store: SqliteAffectStore, limit: int, **filt: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    after = None
    while True:
        page = store.list(limit=limit, after_key=after, **filt)
        items += page["items"]
        after = page["next_after_key"]
        if after is None:
            return items


def check_reads_back(store: SqliteAffectStore, want: dict[str, Any]) -> None:
    """Every read of the upgraded store answers what v1 answered."""
    keys: list[str] = want["keys"]
    got: dict[str, Any] = {}
    for start in range(0, len(keys), 500):
        got.update((r["key"], r) for r in store.get_many(keys[start : start + 500]))
    assert got == want["current"]
    for key in keys:
        assert store.get(key) == want["current"][key]
        assert store.history(key, limit=500) == {
            "items": want["history"][key],
            "next_before_revision": None,
        }
    for key in keys[::37]:  # keyset pages of two
        items: list[dict[str, Any]] = []
        before = None
        while True:
            page = store.history(key, limit=2, before_revision=before)
            items += page["items"]
            before = page["next_before_revision"]
            if before is None:
                break
        assert items == want["history"][key]
    assert page_keys(store, 7) == [want["current"][k] for k in keys]
    filters: list[dict[str, Any]] = [
        {"scope_all": {"tenant": "t1"}},
        {"scope_any": [{"end_user": "u2"}, {"tenant": "t0"}]},
    ]
    for filt in filters:
        expected = [
            want["current"][k]
            for k in keys
            if matches_scope(
                want["current"][k]["scope"], filt.get("scope_all"), filt.get("scope_any")
            )
        ]
        assert page_keys(store, 11, **filt) == expected
    assert sorted(store.dump()["affect_scope"]) == want["scope"]


def test_migrations_are_append_only() -> None:
    assert [m.version for m in MIGRATIONS] == [1, 2, 3]
    assert MIGRATIONS[0].name == "current state, history, scope index, ledger"


def test_v1_file_upgrades_in_place_and_reads_back_equal(tmp_path: Path) -> None:
    path = str(tmp_path / "v1.db")
    first = build_v1(path)
    want = v1_view(path)
    rowids = history_rows(path)
    assert len(want["keys"]) > 300 and any(len(h) >= 3 for h in want["history"].values())
    db = open_v1(path)
    assert db.schema_version() == 1
    db.close()

    store = open_affect_store(path)
    assert store.database.schema_version() == LATEST
    assert check_affect_file(path) == len(want["keys"])
    check_reads_back(store, want)
    # Each row keeps its v1 rowid as its id (the order of writes), and a key_id is
    # the id of its revision 1.
    with store.database.read() as conn:
        ids = {
            (str(k), int(r)): (int(i), int(kid))
            for k, r, i, kid in conn.execute(
                "SELECT c.key, h.revision, h.id, h.key_id FROM affect_history AS h"
                " JOIN affect_current AS c ON c.key_id = h.key_id"
            )
        }
    assert {kr: i for kr, (i, _kid) in ids.items()} == rowids
    assert all(kid == rowids[(k, 1)] for (k, _r), (_i, kid) in ids.items())

    # The v1 ledger entry still replays, and the upgraded file takes new writes.
    assert store.put_many(first, idempotency_key="b0", ctx=CTX) == {"written": 50, "replayed": True}
    old, fresh = want["keys"][0], "brand-new"
    before = want["current"][old]["revision"]
    store.put_many(
        [{"key": old, "scope": {"tenant": "t9"}, "n": -1}, {"key": fresh, "scope": {}, "n": -2}],
        idempotency_key="after",
        ctx=CTX,
    )
    moved = store.get(old)
    assert moved is not None and moved["revision"] == before + 1 and moved["n"] == -1
    assert [r["revision"] for r in store.history(old, limit=500)["items"]] == list(
        range(before + 1, 0, -1)
    )
    assert store.history(old, limit=500)["items"][1:] == want["history"][old]
    assert [r["key"] for r in store.list(scope_all={"tenant": "t9"})["items"]] == [old]
    created = store.get(fresh)
    assert created is not None and created["revision"] == 1
    check_affect_file(path)
    store.close()

    again = open_affect_store(path)  # at v2 already: nothing to do
    assert again.database.schema_version() == LATEST
    assert again.get(old) == moved and again.get(fresh) == created
    again.close()


def test_an_upgraded_file_has_the_schema_of_a_new_one(tmp_path: Path) -> None:
    new, old, empty = (str(tmp_path / f"{n}.db") for n in ("new", "old", "empty"))
    open_affect_store(new).close()
    build_v1(old, keys=40, rounds=1)
    open_affect_store(old).close()
    open_v1(empty).close()
    open_affect_store(empty).close()
    assert schema_sql(old) == schema_sql(new) == schema_sql(empty)
    assert not any("_v1" in str(row) for row in schema_sql(old))


@pytest.mark.parametrize(
    "damage",
    [
        # the current record is not its newest history row's
        "UPDATE affect_current SET record_json = '{\"key\":\"k0100\"}' WHERE key = 'k0100'",
        "UPDATE affect_current SET recorded_at = '2000-01-01T00:00:00.000000Z' WHERE key = 'k0101'",
        # history of a key that is not live
        "DELETE FROM affect_current WHERE key = 'k0102'",
        # a key without its revision 1, or without its current revision
        "DELETE FROM affect_history WHERE key = 'k0103' AND revision = 1",
        "DELETE FROM affect_history WHERE key = 'k0104'",
        # a revision past the current one
        "UPDATE affect_current SET revision = revision - 1 WHERE key = 'k0105' AND revision > 1",
    ],
)
def test_failed_upgrade_leaves_the_v1_file_as_it_was(tmp_path: Path, damage: str) -> None:
    path = str(tmp_path / "v1.db")
    w = V1Writer(path)
    rng = random.Random(3)
    for n in range(3):
        w.put([rec(f"k{i:04d}", rng, n) for i in range(90, 130)])
    w.close()
    db = open_v1(path)
    with db.write() as conn:
        conn.execute(damage)
        assert conn.changes() == 1 or damage.startswith("DELETE FROM affect_history")
    db.close()
    before = dump(path)
    with pytest.raises(StorageCorrupt) as info:
        open_affect_store(path)
    assert "k01" not in str(info.value)
    assert dump(path) == before
    assert open_v1(path).schema_version() == 1


def test_v1_code_refuses_a_v2_file(tmp_path: Path) -> None:
    path = str(tmp_path / "v2.db")
    open_affect_store(path).close()
    with pytest.raises(SchemaTooNew):
        open_v1(path)


@pytest.mark.slow
def test_sigkill_during_the_upgrade_leaves_v1_whole_or_v2_complete(tmp_path: Path) -> None:
    # Enough rows that the upgrade's copy spills pages into the WAL before it
    # commits, so a kill leaves uncommitted frames for recovery to drop.
    pristine = str(tmp_path / "pristine.db")
    build_v1(pristine, keys=3000, rounds=2)
    want = v1_view(pristine)
    rows = sum(len(h) for h in want["history"].values())
    probe = str(tmp_path / "probe.db")
    shutil.copy(pristine, probe)
    start = time.perf_counter()
    open_affect_store(probe).close()
    upgrade_s = time.perf_counter() - start
    outcomes: list[tuple[int, int]] = []
    for n, fraction in enumerate([0.2, 0.4, 0.6, 0.8, 3.0]):
        path = str(tmp_path / f"killed{n}.db")
        shutil.copy(pristine, path)
        # The worker acknowledges once imported, then opens (upgrades) the file.
        kill_mid_stream(
            [str(WORKER), path], min_acks=1, rng=FixedDelay(fraction), max_delay_s=upgrade_s
        )
        wal = Path(path + "-wal")
        wal_bytes = wal.stat().st_size if wal.exists() else 0
        conn = apsw.Connection(path)  # recovers the WAL of the killed process
        version = int(
            conn.execute(  # type: ignore[arg-type]
                "SELECT max(version) FROM ratatoskr_schema WHERE plane = 'affect'"
            ).fetchall()[0][0]
        )
        conn.close()
        outcomes.append((version, wal_bytes))
        if version == 1:
            assert v1_view(path) == want  # v1, whole
        else:
            assert version == LATEST
            assert check_affect_file(path) == len(want["keys"])
            conn = apsw.Connection(path)
            assert conn.execute("SELECT count(*) FROM affect_history").fetchall() == [(rows,)]
            conn.close()
        store = open_affect_store(path)
        for key in want["keys"][::50]:
            assert store.get(key) == want["current"][key]
            assert store.history(key, limit=500)["items"] == want["history"][key]
        store.close()
    # (schema version, WAL bytes) after each kill: v1 with a large WAL is a kill that
    # landed inside the upgrade after it had spilled pages.
    print(f"upgrade {upgrade_s:.2f} s; after each kill: {outcomes}")
    assert outcomes[-1][0] == LATEST
