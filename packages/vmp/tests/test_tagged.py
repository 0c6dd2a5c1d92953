"""The metadata flags stand for exactly one state of the file, or for none."""

from __future__ import annotations

from pathlib import Path

from ratatoskr.sqlite import ConnectionOptions
from ratatoskr.vmp import open_vmp_store
from ratatoskr.vmp.tagged import MetadataFlags

from .conftest import DIM, vec


def test_flags_answer_only_for_their_state() -> None:
    flags = MetadataFlags()
    assert flags.current(0, 0, 0) is None and flags.covers(0, 0) is None
    flags.load(3, 5, 4, [1, 3])
    got = flags.current(3, 5, 4)
    assert got is not None and list(got[:4]) == [0, 1, 0, 1]
    assert flags.covers(3, 5) == 4
    # Another epoch, another version, another count: not this state.
    assert flags.current(4, 5, 4) is None
    assert flags.current(3, 6, 4) is None
    assert flags.current(3, 5, 5) is None and flags.covers(3, 6) is None


def test_appends_extend_only_at_the_end() -> None:
    flags = MetadataFlags()
    flags.load(0, 0, 2, [])
    published = flags.current(0, 0, 2)
    flags.inserted(0, 0, 2, True)
    flags.inserted(0, 0, 5, True)  # not the next record: ignored
    flags.inserted(1, 0, 3, True)  # another epoch: ignored
    flags.extend(0, 0, 3, [False] * 100)  # grows past the first capacity
    flags.extend(0, 0, 7, [True])  # not where the flags end: ignored
    got = flags.current(0, 0, 103)
    assert got is not None and list(got[:4]) == [0, 0, 1, 0]
    assert sum(got[:103]) == 1
    assert published is not None and list(published[:2]) == [0, 0]


def test_updates_apply_in_order_or_forget() -> None:
    flags = MetadataFlags()
    flags.load(0, 7, 3, [0])
    before = flags.current(0, 7, 3)
    flags.updated(0, 7, 1, True)  # 7 → 8
    after = flags.current(0, 8, 3)
    assert after is not None and list(after[:3]) == [1, 1, 0]
    assert before is not None and list(before[:3]) == [1, 0, 0]  # never changed
    flags.updated(0, 7, 2, True)  # already at 8 (read from the file after the commit): kept
    assert flags.current(0, 8, 3) is not None
    flags.updated(0, 9, 2, True)  # an update this process did not see came between
    assert flags.current(0, 8, 3) is None and flags.current(0, 10, 3) is None
    flags.load(0, 10, 3, [])
    flags.updated(0, 10, 3, True)  # a record the flags do not hold yet
    assert flags.current(0, 11, 3) is None and flags.covers(0, 10) is None
    flags.load(0, 11, 3, [])
    flags.forget()
    assert flags.current(0, 11, 3) is None


def test_the_counter_counts_every_metadata_update(tmp_path: Path) -> None:
    # The trigger of migration 2 bumps metadata_changes for each update of a record's
    # metadata, through any connection; upserts and node metadata leave it alone.
    path = str(tmp_path / "vmp.db")
    with open_vmp_store(path, dim=DIM, options=ConnectionOptions(synchronous="OFF")) as store:
        store.upsert_vector(vec(1), metadata={"a": 1})
        store.upsert_vector(vec(2))

        def counter() -> int:
            with store._db.read() as conn:
                return int(
                    conn.execute("SELECT metadata_changes FROM vmp_state").fetchall()[0][0]  # type: ignore[arg-type]
                )

        assert counter() == 0
        store.set_metadata("node:0", {"n": 1})
        assert counter() == 0
        store.set_metadata("rec:1", {"b": 2})
        store.set_metadata("rec:1", {"b": 2})  # the same value: counted all the same
        assert counter() == 2
        with store._db.write() as conn:  # a writer that is not this store's code
            conn.execute("UPDATE vmp_records SET metadata = NULL WHERE record_id = 0")
        assert counter() == 3
        # The store's flags did not see that update: the next search reloads them.
        hits = store.search_vector(vec(1), 2)
        assert [(h.record_id, h.metadata) for h in hits] == [(0, None), (1, {"b": 2})]


def test_one_update_behind_steps_and_others_wait() -> None:
    flags = MetadataFlags()
    flags.load(0, 4, 3, [2])
    flags.step(0, 5, 1, True)  # the file's update 4 → 5 was of record 1
    got = flags.current(0, 5, 3)
    assert got is not None and list(got[:3]) == [0, 1, 1]
    flags.step(0, 5, 0, True)  # not one behind any more: ignored
    flags.step(0, 7, 0, True)  # two behind: ignored
    flags.step(1, 6, 0, True)  # another epoch: ignored
    assert flags.current(0, 5, 3) is got
    flags.step(0, 6, 9, True)  # a record past the flags: the append that reads it sets it
    stepped = flags.current(0, 6, 3)
    assert stepped is not None and list(stepped[:3]) == [0, 1, 1]


def test_reloads_are_spread_over_searches() -> None:
    flags = MetadataFlags(rows_per_search=10)
    assert flags.may_reload(35)  # then 3 searches answer without flags
    assert [flags.may_reload(35) for _ in range(4)] == [False, False, False, True]
    assert [flags.may_reload(5) for _ in range(3)] == [False, False, False]  # 35's wait
    # Fewer rows than one search's share: a reload every time.
    assert [flags.may_reload(5) for _ in range(3)] == [True, True, True]


def test_another_process_one_update_is_caught_up_without_a_reload(tmp_path: Path) -> None:
    # Another store on the file stands in for another process: after each of its
    # metadata updates, one search reads the changed record alone (no reload of every
    # flag) and is right; the search after it answers from memory again.
    path = str(tmp_path / "vmp.db")
    fast = ConnectionOptions(synchronous="OFF")
    with (
        open_vmp_store(path, dim=DIM, options=fast) as a,
        open_vmp_store(path, dim=DIM, options=fast) as b,
    ):
        for i in range(30):
            a.upsert_vector(vec(i), metadata={"i": i} if i % 2 else None)
        b.search_vector(vec(0), 3)
        loads: list[int] = []
        original = b._flags.load

        def spy(epoch: int, version: int, count: int, tagged: list[int]) -> None:
            loads.append(count)
            original(epoch, version, count, tagged)

        b._flags.load = spy  # type: ignore[method-assign]
        for target, value in (("rec:0", {"now": 0}), ("rec:1", None), ("rec:0", None)):
            a.set_metadata(target, value)
            number = int(target.split(":")[1])
            hits = {h.record_id: h.metadata for h in b.search_vector(vec(number), 30)}
            assert hits[number] == value and len(hits) == 30
            with b._db.read() as conn:
                ((version,),) = conn.execute("SELECT metadata_changes FROM vmp_state").fetchall()
            assert isinstance(version, int)
            held = b._index.current()
            assert held is not None and b._flags.current(held[0], version, 30) is not None
        assert loads == []
        # Two updates between searches: not one behind; answered right all the same.
        a.set_metadata("rec:2", {"two": 1})
        a.set_metadata("rec:3", {"two": 2})
        hits = {h.record_id: h.metadata for h in b.search_vector(vec(2), 30)}
        assert hits[2] == {"two": 1} and hits[3] == {"two": 2} and hits[5] == {"i": 5}
