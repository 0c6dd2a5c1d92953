"""The in-memory index finds exactly what the pure-Python integer reference finds."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratatoskr.vmp.fixedpoint import Q_MAX, Q_MIN, squared_l2
from ratatoskr.vmp.index import ExactIndex, exact_distances


def reference_top_k(rows: list[list[int]], query: list[int], k: int) -> list[tuple[int, int]]:
    ranked = sorted((squared_l2(row, query), rid) for rid, row in enumerate(rows))
    return [(rid, dist) for dist, rid in ranked[:k]]


def index_of(rows: list[list[int]], dim: int) -> ExactIndex:
    index = ExactIndex(dim)
    matrix = np.asarray(rows, dtype=np.int32).reshape(-1, dim)
    index.view(0, len(rows), lambda start, stop: matrix[start:stop])
    return index


def search(rows: list[list[int]], query: list[int], k: int, dim: int) -> list[tuple[int, int]]:
    index = index_of(rows, dim)
    return index.view(0, len(rows), lambda a, b: np.empty((0, dim), np.int32)).top_k(query, k)


EXTREMES = [Q_MIN, Q_MAX, Q_MIN + 1, Q_MAX - 1, 0, -1, 1]
q_value = st.one_of(
    st.sampled_from(EXTREMES),
    st.integers(min_value=Q_MIN, max_value=Q_MAX),
    st.integers(min_value=-(2**17), max_value=2**17),
)


@st.composite
def cases(draw: st.DrawFn) -> tuple[int, list[list[int]], list[int], int]:
    dim = draw(st.sampled_from([1, 2, 3, 16]))
    vector = st.lists(q_value, min_size=dim, max_size=dim)
    base = draw(st.lists(vector, min_size=0, max_size=40))
    # Duplicates force ties, which must be broken by the lower record_id.
    dups = draw(st.lists(st.sampled_from(base), max_size=10)) if base else []
    rows = base + dups
    draw(st.randoms()).shuffle(rows)
    query = draw(st.one_of(vector, st.sampled_from(rows) if rows else vector))
    k = draw(st.integers(min_value=1, max_value=50))
    return dim, rows, query, k


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
@pytest.mark.slow
def test_top_k_equals_reference(case: tuple[int, list[list[int]], list[int], int]) -> None:
    dim, rows, query, k = case
    assert search(rows, query, k, dim) == reference_top_k(rows, query, k)


@st.composite
def near_cases(draw: st.DrawFn) -> tuple[list[list[int]], list[int], int]:
    """Many rows around one centre, so the prefilter must prune among near-equal distances."""
    dim = 6
    centre = draw(st.lists(q_value, min_size=dim, max_size=dim))
    spread = draw(st.sampled_from([1, 7, 2**8, 2**16, 2**24]))
    # A PRNG seeded by hypothesis: through hypothesis's own random every randint was a
    # recorded choice (up to 200 x 6 a case). Centre, spread, rows and k are still drawn.
    rng = draw(st.randoms(use_true_random=True))

    def near() -> list[int]:
        return [min(Q_MAX, max(Q_MIN, c + rng.randint(-spread, spread))) for c in centre]

    rows = [near() for _ in range(draw(st.integers(min_value=20, max_value=200)))]
    return rows, near(), draw(st.integers(min_value=1, max_value=5))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(near_cases())
@pytest.mark.slow
def test_prefilter_keeps_every_true_neighbour(case: tuple[list[list[int]], list[int], int]) -> None:
    rows, query, k = case
    assert search(rows, query, k, 6) == reference_top_k(rows, query, k)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(q_value, min_size=8, max_size=8), min_size=1, max_size=20),
    st.lists(q_value, min_size=8, max_size=8),
)
def test_exact_distances_limbs(rows: list[list[int]], query: list[int]) -> None:
    hi, lo = exact_distances(np.asarray(rows, dtype=np.int32), np.asarray(query, dtype=np.int64))
    for i, row in enumerate(rows):
        assert 0 <= int(lo[i]) < 2**32
        assert (int(hi[i]) << 32) + int(lo[i]) == squared_l2(row, query)


def test_worst_case_magnitudes_at_max_dim() -> None:
    # dim 4096 with every difference at its extreme: the int64 partial sums must not overflow.
    dim = 4096
    rows = [[Q_MIN] * dim, [Q_MAX] * dim, [Q_MIN, Q_MAX] * (dim // 2)]
    query = [Q_MAX] * dim
    assert search(rows, query, 3, dim) == reference_top_k(rows, query, 3)


@pytest.mark.parametrize("dim", [16, 384])
def test_clustered_large_magnitudes(dim: int) -> None:
    # Vectors far from the origin that differ by a few units: the float prefilter is
    # useless here (its error bound dwarfs the gaps), so the exact pass decides alone.
    rng = random.Random(dim)
    centre = [rng.choice([Q_MIN, Q_MAX]) for _ in range(dim)]
    rows = [
        [c + rng.randint(0, 6) if c == Q_MIN else c - rng.randint(0, 6) for c in centre]
        for _ in range(300)
    ]
    rows += rows[:20]  # exact duplicates
    query = [c - 3 if c == Q_MAX else c + 3 for c in centre]
    assert search(rows, query, 25, dim) == reference_top_k(rows, query, 25)


@pytest.mark.parametrize("dim", [16, 384])
def test_random_embeddings_prefilter(dim: int) -> None:
    rng = np.random.default_rng(dim)
    rows = np.trunc(rng.standard_normal((1000, dim)) / np.sqrt(dim) * 65536).astype(np.int64)
    view = index_of(rows.tolist(), dim).view(0, 1000, lambda a, b: np.empty((0, dim), np.int32))
    for _ in range(3):
        query = np.trunc(rng.standard_normal(dim) / np.sqrt(dim) * 65536).astype(np.int64)
        ranked = reference_top_k(rows.tolist(), query.tolist(), 1000)
        for k in (1, 10, 100):
            assert view.top_k(query.tolist(), k) == ranked[:k]
        # On ordinary data the float pass leaves few rows for the exact pass.
        assert len(view.prefilter(query, 10)) < 100


def test_views_survive_appends_and_epochs() -> None:
    index = ExactIndex(2)
    first = np.asarray([[0, 0], [10, 10]], dtype=np.int32)
    view = index.view(7, 2, lambda a, b: first[a:b])
    for i in range(100):  # grow past the first capacity: the old view must not change
        index.append_if_next(7, 2 + i, [i, i])
    assert view.top_k([0, 0], 5) == [(0, 0), (1, 200)]
    assert index.view(7, 102, lambda a, b: np.empty((0, 2), np.int32)).top_k([5, 5], 1) == [
        (2 + 5, 0)
    ]
    # A record that is not the next row is ignored (a later view loads it instead).
    index.append_if_next(7, 500, [1, 1])
    # Another epoch reloads from scratch.
    other = np.asarray([[3, 3]], dtype=np.int32)
    assert index.view(8, 1, lambda a, b: other[a:b]).top_k([0, 0], 5) == [(0, 18)]


def test_empty_and_k_larger_than_count() -> None:
    assert search([], [0, 0], 5, 2) == []
    assert search([[1, 1]], [0, 0], 1000, 2) == [(0, 2)]


def test_view_of_every_row_is_kept_until_the_next_append() -> None:
    index = ExactIndex(2)
    rows = np.asarray([[0, 0], [3, 4]], dtype=np.int32)
    assert index.current() is None  # no history yet
    first = index.view(1, 2, lambda a, b: rows[a:b])
    assert index.current() == (1, first)
    assert index.view(1, 2, lambda a, b: rows[a:b]) is first
    assert index.view(1, 1, lambda a, b: rows[a:b]).fixed.shape[0] == 1
    index.append_if_next(1, 2, [6, 8])
    held = index.current()
    assert held is not None and held[1] is not first
    assert held[1].top_k([6, 8], 3) == [(2, 0), (1, 25), (0, 100)]
    assert first.top_k([6, 8], 3) == [(1, 25), (0, 100)]  # the old view is unchanged


@pytest.mark.parametrize("dim", [1, 2, 16, 32, 33])
def test_large_views_with_crowded_keys(dim: int) -> None:
    # Thousands of rows, many exactly equal, on both prefilter kernels: the float pass
    # meets long runs of equal keys and the threshold's float32 rounding.
    rng = np.random.default_rng(dim)
    base = rng.integers(-(2**16), 2**16, size=(300, dim))
    rows = np.concatenate([base[rng.integers(0, 300, size=3000)], base]).tolist()
    view = index_of(rows, dim).view(0, len(rows), lambda a, b: np.empty((0, dim), np.int32))
    for j in range(4):
        query = rows[j * 7] if j % 2 else rng.integers(-(2**16), 2**16, size=dim).tolist()
        ranked = reference_top_k(rows, query, 60)
        for k in (1, 10, 60):
            assert view.top_k(query, k) == ranked[:k]
