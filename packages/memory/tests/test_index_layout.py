"""The scope-grouped layout under writes: segments that grow, move, shrink, vanish and
get compacted keep answering exactly what a model of the live chunks says."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bifrost.scope import SCOPE_LATTICE
from ratatoskr.memory import quantized
from ratatoskr.memory.index import VectorIndex, scope_items
from ratatoskr.memory.records import exact_scores, unit_float32_rows, unit_float64
from ratatoskr.memory.segments import _layout_key

DIM = 6
values = st.sampled_from(["a", "b", "c"])
scopes = st.dictionaries(st.sampled_from(SCOPE_LATTICE), values, max_size=3)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("upsert"), st.lists(st.integers(0, 80), min_size=1, max_size=12), scopes),
        st.tuples(st.just("delete"), st.integers(0, 80)),
        st.tuples(st.just("compact"), st.booleans()),
    ),
    min_size=1,
    max_size=80,
)


def matches(scope: dict[str, str], s_all: dict[str, str], s_any: list[dict[str, str]]) -> bool:
    if any(scope.get(k) != v for k, v in s_all.items()):
        return False
    return not s_any or any(all(scope.get(k) == v for k, v in m.items()) for m in s_any)


def vector(i: int, version: int) -> list[float]:
    rng = np.random.default_rng(i * 1000 + version)
    return [float(x) for x in rng.standard_normal(DIM)]


def check_against_model(
    index: VectorIndex, model: dict[str, tuple[list[float], dict[str, str]]], rng: Any
) -> None:
    assert len(index) == len(model)
    assert all(cid in index for cid in model)
    for _ in range(3):
        s_all = {"tenant": "a"} if rng.random() < 0.5 else {}
        s_any = [{"group": "b"}, {"end_user": "c"}] if rng.random() < 0.5 else []
        k = int(rng.integers(1, 30))
        query = rng.standard_normal(DIM)
        classes = index.classes_in_scope(s_all, s_any)
        got = [
            c.chunk_id for c in index.nearest(unit_float64(query).astype(np.float32), k, classes)
        ]
        inside = [cid for cid, (_, scope) in model.items() if matches(scope, s_all, s_any)]
        assert set(got) <= set(inside)
        if not inside:
            assert got == []
            continue
        scores = exact_scores([np.asarray(model[c][0]) for c in inside], unit_float64(query))
        expected = sorted(zip((-scores).tolist(), inside, strict=True))[:k]
        found = exact_scores([np.asarray(model[c][0]) for c in got], unit_float64(query))
        assert sorted(zip((-found).tolist(), got, strict=True))[:k] == expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops, seed=st.integers(0, 2**16))
@pytest.mark.slow
def test_writes_keep_the_layout_consistent(ops: list[tuple[Any, ...]], seed: int) -> None:
    rng = np.random.default_rng(seed)
    index = VectorIndex(DIM, capacity=16)
    model: dict[str, tuple[list[float], dict[str, str]]] = {}
    for n, op in enumerate(ops):
        if op[0] == "upsert":
            ids = [f"c{i:03d}" for i in dict.fromkeys(op[1])]
            vecs = [vector(int(cid[1:]), n) for cid in ids]
            index.upsert_many(ids, unit_float32_rows(vecs, DIM), [op[2]] * len(ids))
            for cid, v in zip(ids, vecs, strict=True):
                model[cid] = (v, op[2])
        elif op[0] == "delete":
            index.remove(f"c{op[1]:03d}")
            model.pop(f"c{op[1]:03d}", None)
        else:
            index.compact(room=op[1])  # with room: what writes compact to between batches
        check_against_model(index, model, rng)
        if op[0] == "compact" and not op[1]:
            assert index._end == len(model)  # tight: what a sidecar holds


def test_a_load_lays_each_tenant_out_contiguously() -> None:
    n = 3000
    ids = [f"c{i:05d}" for i in range(n)]
    scopes = [scope_items({"tenant": f"t{i % 7}", "end_user": f"u{i % 11}"}) for i in range(n)]
    rng = np.random.default_rng(0)
    index = VectorIndex(DIM)
    index.load(ids, rng.standard_normal((n, DIM)).astype(np.float32), scopes)
    for t in range(7):
        runs = index._runs(index.classes_in_scope({"tenant": f"t{t}"}, []) or set())
        assert len(runs) == 1
        assert runs[0][1] - runs[0][0] == sum(1 for s in scopes if dict(s)["tenant"] == f"t{t}")
    starts = [
        seg.start for seg in sorted(index._segments.values(), key=lambda s: _layout_key(s.items))
    ]
    assert starts == sorted(starts)


@pytest.mark.slow
def test_moving_segments_and_compaction_reclaim_space() -> None:
    """Interleaved inserts into many classes move segments; deleting most rows and
    compacting gives the space back, and the answers stay those of the model."""
    rng = np.random.default_rng(5)
    index = VectorIndex(DIM, capacity=16)
    model: dict[str, tuple[list[float], dict[str, str]]] = {}
    for i in range(6000):
        scope = {"tenant": f"t{i % 40}"}
        v = vector(i, 0)
        index.upsert(f"c{i:05d}", unit_float32_rows([v], DIM)[0], scope)
        model[f"c{i:05d}"] = (v, scope)
    check_against_model(index, model, rng)
    for i in range(0, 6000, 4):
        if i % 3:
            index.remove(f"c{i:05d}")
            model.pop(f"c{i:05d}")
    for i in range(0, 6000, 5):
        index.remove(f"c{i:05d}")
        model.pop(f"c{i:05d}", None)
    check_against_model(index, model, rng)
    before = index._end
    index.compact()
    assert index._end == len(model) < before
    check_against_model(index, model, rng)


def test_loading_coded_rows_gives_the_index_loading_unit_rows_gives() -> None:
    """A rebuild codes rows in read order and lays the codes out (load_coded); it must
    be the index that coding rows already laid out gives (load_units), bit for bit."""
    n = 2500
    rng = np.random.default_rng(9)
    ids = [f"c{i:05d}" for i in rng.permutation(n)]
    scopes = [scope_items({"tenant": f"t{i % 5}", "end_user": f"u{i % 3}"}) for i in range(n)]
    units = unit_float32_rows(rng.standard_normal((n, DIM)).tolist(), DIM)
    by_units = VectorIndex(DIM)
    by_units.load_units(ids, units, scopes)
    codes = quantized.encode(units)
    by_codes = VectorIndex(DIM)
    arrays: list[npt.NDArray[Any]] = [
        codes.codes.copy(),
        codes.resid.copy(),
        codes.scale.copy(),
        codes.scale2.copy(),
    ]
    errors = (float(codes.err1.max()), float(codes.err2.max()))
    by_codes.load_coded(ids, arrays, scopes, errors)
    assert arrays == []  # consumed
    a, b = by_units.image(), by_codes.image()
    assert (a.ids, a.classes, a.err1_max, a.err2_max) == (b.ids, b.classes, b.err1_max, b.err2_max)
    for x, y in ((a.codes, b.codes), (a.resid, b.resid), (a.scale, b.scale), (a.scale2, b.scale2)):
        assert x.tobytes() == y.tobytes()
    model = {
        cid: (units[i].astype(np.float64).tolist(), dict(scopes[i])) for i, cid in enumerate(ids)
    }
    check_against_model(by_codes, model, rng)


def test_writes_after_a_tight_layout_do_not_move_every_class_again_and_again() -> None:
    """A tight index (a sidecar's, or a fresh rebuild's) taking batches that touch every
    class: each class moves once to gain room, and compaction between writes leaves
    room too (a tight one made every next write move its class again: the upsert rate
    fell with the store's size)."""
    classes, per_class = 200, 30
    n = classes * per_class
    rng = np.random.default_rng(3)
    ids = [f"c{i:05d}" for i in range(n)]
    scopes = [scope_items({"tenant": f"t{i % classes}"}) for i in range(n)]
    index = VectorIndex(DIM)
    index.load(ids, rng.standard_normal((n, DIM)).astype(np.float32), scopes)
    model = {cid: dict(scope) for cid, scope in zip(ids, scopes, strict=True)}
    moved: list[int] = []
    for b in range(40):
        before = [(seg.start, seg.count) for seg in index._segments.values()]
        new = [f"n{b:02d}-{i:03d}" for i in range(classes)]
        batch_scopes = [{"tenant": f"t{i}"} for i in range(classes)]
        index.upsert_many(
            new, unit_float32_rows(rng.standard_normal((classes, DIM)).tolist(), DIM), batch_scopes
        )
        model.update(zip(new, batch_scopes, strict=True))
        after = {(seg.start, seg.count) for seg in index._segments.values()}
        moved.append(sum(count for start, count in before if (start, count + 1) not in after))
    assert moved[0] > n // 2  # the first batch moves (nearly) every class once
    # Then a class moves only when its room (half its size again) is used up: rows
    # moved stay a few per row written (34k for these 8,000; a tight compaction
    # moved 387k, every class again a few batches after each compaction).
    assert sum(moved) < 6 * len(moved) * classes
    assert len(index) == len(model)
    for t in range(0, classes, 37):
        got = index.classes_in_scope({"tenant": f"t{t}"}, [])
        assert got is not None and sum(index._segments[c].count for c in got) == per_class + 40


def test_a_compaction_with_room_never_calls_for_the_next_one() -> None:
    """One-row classes (an end user with one memory) get more room than rows; the
    trigger judges only what a compaction would not keep, so writes after one do
    not compact again and again (each compaction is a copy of the whole index)."""
    classes = 6000
    rng = np.random.default_rng(0)
    ids = [f"c{i:05d}" for i in range(classes)]
    scopes = [scope_items({"tenant": "t", "end_user": f"u{i}"}) for i in range(classes)]
    index = VectorIndex(DIM)
    index.load(ids, rng.standard_normal((classes, DIM)).astype(np.float32), scopes)
    index.compact(room=True)
    compactions = []
    original = index.compact

    def counted(*, room: bool = False) -> None:
        compactions.append(room)
        original(room=room)

    index.compact = counted  # type: ignore[method-assign]
    for b in range(60):
        new = [f"n{b:02d}-{i:03d}" for i in range(100)]
        batch = [{"tenant": "t", "end_user": f"u{int(u)}"} for u in rng.integers(0, classes, 100)]
        index.upsert_many(
            new, unit_float32_rows(rng.standard_normal((100, DIM)).tolist(), DIM), batch
        )
    assert len(compactions) <= 2
    assert len(index) == classes + 6000


def _kept_by_walking(index: VectorIndex) -> int:
    """What the compaction trigger summed over every class before it kept a running sum."""
    return sum(min(s.cap, s.count + max(4, s.count // 4)) for s in index._segments.values())


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops, seed=st.integers(0, 2**16))
@pytest.mark.slow
def test_the_running_count_of_kept_rows_is_the_walk_over_every_class(
    ops: list[tuple[Any, ...]], seed: int
) -> None:
    """Whatever writes, deletes and compactions did (and ids repeated in one batch, or
    moved to another class), the trigger's running sum equals the sum over every class."""
    rng = np.random.default_rng(seed)
    index = VectorIndex(DIM, capacity=16)
    for n, op in enumerate(ops):
        if op[0] == "upsert":
            ids = [f"c{i:03d}" for i in op[1]]  # repeats kept: the last one wins
            scopes_of = [op[2] if j % 2 else dict(op[2], agent_self="z") for j in range(len(ids))]
            vecs = [vector(int(cid[1:]), n) for cid in ids]
            index.upsert_many(ids, unit_float32_rows(vecs, DIM), scopes_of)
        elif op[0] == "delete":
            index.remove(f"c{op[1]:03d}")
        else:
            index.compact(room=op[1])
        if rng.random() < 0.5:
            assert index.kept_rows() == _kept_by_walking(index)
    assert index.kept_rows() == _kept_by_walking(index)


def test_a_batch_repeating_an_id_keeps_its_last_vector_and_scope() -> None:
    """Codes are written once per batch, at each id's final row: an id given twice (in
    two classes) ends with its last vector, in its last class, and nothing else moves."""
    rng = np.random.default_rng(4)
    raw = rng.standard_normal((6, DIM))
    index = VectorIndex(DIM, capacity=16)
    ids = ["a", "b", "a", "c", "b", "d"]
    scopes_of = [{"tenant": "x"}, {"tenant": "x"}, {"tenant": "y"}, {"tenant": "x"}, {}, {}]
    index.upsert_many(ids, unit_float32_rows(raw.tolist(), DIM), scopes_of)
    model = {
        "a": (raw[2].tolist(), {"tenant": "y"}),
        "b": (raw[4].tolist(), {}),
        "c": (raw[3].tolist(), {"tenant": "x"}),
        "d": (raw[5].tolist(), {}),
    }
    for cid, (vec, scope) in model.items():
        only = index.nearest(
            unit_float64(vec).astype(np.float32), 1, index.classes_in_scope(scope, [])
        )
        assert cid in [c.chunk_id for c in only]
    check_against_model(index, model, rng)
