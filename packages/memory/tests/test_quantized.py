"""The int8 first pass never loses a true top-k member: against a float64 brute force
over adversarial data (near-ties, exact duplicates, vectors one ulp apart, tiny and
huge magnitudes, top_k past the in-scope set, scope filters)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratatoskr.memory import index as index_module
from ratatoskr.memory import quantized
from ratatoskr.memory.index import VectorIndex
from ratatoskr.memory.records import exact_scores, unit_float32_rows, unit_float64

F64 = npt.NDArray[np.float64]
AXES = ("tenant", "end_user")


def oracle(
    raw: F64,
    ids: list[str],
    scopes: list[dict[str, str]],
    query: F64,
    k: int,
    scope_all: dict[str, str],
) -> list[tuple[float, str]]:
    """Today's ranking: the store's float64 score descending, then chunk_id ascending."""
    rows = [i for i, s in enumerate(scopes) if all(s.get(a) == v for a, v in scope_all.items())]
    if not rows:
        return []
    scores = exact_scores([raw[i] for i in rows], unit_float64(query))
    return sorted((-float(scores[j]), ids[i]) for j, i in enumerate(rows))[:k]


def rerank(
    raw: F64, ids: list[str], found: list[str], query: F64, k: int
) -> list[tuple[float, str]]:
    """What the store does with the candidates: exact float64 scores, the same tie-break."""
    if not found:
        return []
    at = {cid: i for i, cid in enumerate(ids)}
    scores = exact_scores([raw[at[c]] for c in found], unit_float64(query))
    return sorted(zip((-scores).tolist(), found, strict=True))[:k]


def build(raw: F64, ids: list[str], scopes: list[dict[str, str]]) -> VectorIndex:
    index = VectorIndex(raw.shape[1])
    index.upsert_many(ids, unit_float32_rows(raw.tolist(), raw.shape[1]), scopes)
    return index


def check(
    index: VectorIndex,
    raw: F64,
    ids: list[str],
    scopes: list[dict[str, str]],
    query: F64,
    k: int,
    scope_all: dict[str, str],
) -> None:
    q32 = unit_float64(query).astype(np.float32)
    classes = index.classes_in_scope(scope_all, [])
    found = [c.chunk_id for c in index.nearest(q32, k, classes)]
    expected = oracle(raw, ids, scopes, query, k, scope_all)
    assert len(set(found)) == len(found)
    # Every true top-k member (and every row tied with the last) is a candidate ...
    if expected:
        last = expected[-1][0]
        must = {
            cid for neg, cid in oracle(raw, ids, scopes, query, len(ids), scope_all) if neg <= last
        }
        assert must <= set(found)
    # ... so the store's exact re-rank gives exactly today's answer, order included.
    assert rerank(raw, ids, found, query, k) == expected


def _near_tie_rows(rng: np.random.Generator, base: F64, n: int, how: str) -> F64:
    rows = np.tile(base, (n, 1))
    for i in range(1, n):
        j = int(rng.integers(0, base.size))
        if how == "ulp":
            rows[i, j] = np.nextafter(rows[i, j], np.inf if i % 2 else -np.inf)
        elif how == "tiny":
            rows[i] += rng.standard_normal(base.size) * 1e-7
        elif how == "dup":
            pass
        else:
            rows[i] += rng.standard_normal(base.size) * 1e-3
    return rows


datasets = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 2**32 - 1),
        "dim": st.sampled_from([3, 8, 64, 384]),
        "n": st.integers(1, 120),
        "cluster": st.sampled_from(["ulp", "tiny", "dup", "small", "none"]),
        "magnitude": st.sampled_from([1.0, 1e-300, 1e300, 5e-310]),
        "k": st.integers(1, 150),
        "filtered": st.booleans(),
        "query_on_cluster": st.booleans(),
    }
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=datasets)
@pytest.mark.slow
def test_the_quantized_pass_keeps_every_true_top_k_member(case: dict[str, Any]) -> None:
    rng = np.random.default_rng(case["seed"])
    dim, n = case["dim"], case["n"]
    raw = rng.standard_normal((n, dim))
    base = rng.standard_normal(dim)
    if case["cluster"] != "none":
        m = max(1, n // 2)
        raw[:m] = _near_tie_rows(rng, base, m, case["cluster"])
    raw *= case["magnitude"]
    ids = [f"c{int(i):04d}" for i in rng.permutation(n)]
    scopes = [{"tenant": f"t{i % 3}", "end_user": f"u{i % 5}"} for i in range(n)]
    index = build(raw, ids, scopes)
    query = (
        base + rng.standard_normal(dim) * 1e-4
        if case["query_on_cluster"]
        else rng.standard_normal(dim)
    )
    scope_all = {"tenant": "t1"} if case["filtered"] else {}
    check(index, raw, ids, scopes, query, case["k"], scope_all)


@pytest.mark.slow
def test_one_ulp_apart_and_duplicates_in_a_large_crowd() -> None:
    """2,000 rows within a few ulps of each other (the int8 codes of most are equal)
    beside 2,000 random ones: the candidates still hold the whole float64 top k."""
    rng = np.random.default_rng(3)
    dim = 384
    base = rng.standard_normal(dim)
    crowd = _near_tie_rows(rng, base, 2000, "ulp")
    raw = np.vstack([crowd, rng.standard_normal((2000, dim))])
    ids = [f"c{i:05d}" for i in range(raw.shape[0])]
    scopes = [{"tenant": f"t{i % 2}"} for i in range(raw.shape[0])]
    index = build(raw, ids, scopes)
    for k in (1, 10, 100, 1000):
        check(index, raw, ids, scopes, base, k, {})
        check(index, raw, ids, scopes, base, k, {"tenant": "t0"})


def test_the_bound_holds_for_every_row_of_random_data() -> None:
    """Each stage-1 score is within its bound of the store's exact score, row by row
    (stage 2's fine scores: test_the_fine_bound_holds_for_every_row_of_random_data)."""
    rng = np.random.default_rng(11)
    for dim in (8, 384, 1536):
        raw = rng.standard_normal((500, dim)) * rng.choice([1e-200, 1.0, 1e200], (500, 1))
        units = unit_float32_rows(raw.tolist(), dim)
        codes = quantized.encode(units)
        for _ in range(5):
            query = unit_float64(rng.standard_normal(dim))
            code = quantized.encode_query(query.astype(np.float32))
            exact = exact_scores(list(raw), query)
            a = quantized.int_dots(code.codes, codes.codes) * (code.scale * codes.scale)
            assert np.all(np.abs(exact - a) <= quantized.bound1(code, float(codes.err1.max()), dim))


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), dim=st.sampled_from([1, 7, 16, 384, 4096]))
def test_the_int8_kernel_is_exact(seed: int, dim: int) -> None:
    rng = np.random.default_rng(seed)
    rows = rng.integers(-127, 128, (9, dim)).astype(np.int8)
    rows[0] = 127
    rows[1] = -127
    query = rng.integers(-127, 128, dim).astype(np.int8)
    expected = rows.astype(np.int64) @ query.astype(np.int64)
    assert np.array_equal(quantized.int_dots(query, rows), expected.astype(np.float64))


def _answer(
    index: VectorIndex, raw: F64, ids: list[str], query: F64, k: int, scope_all: dict[str, str]
) -> list[tuple[float, str]]:
    q32 = unit_float64(query).astype(np.float32)
    found = [c.chunk_id for c in index.nearest(q32, k, index.classes_in_scope(scope_all, []))]
    return rerank(raw, ids, found, query, k)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=datasets)
def test_the_fine_pass_and_the_two_stages_give_the_same_answer(case: dict[str, Any]) -> None:
    """The same rows through the fine pass and through both stages: each keeps every
    true top-k member, and the store's re-rank of either is today's answer, scores
    bit for bit."""
    rng = np.random.default_rng(case["seed"])
    dim, n = case["dim"], case["n"]
    raw = rng.standard_normal((n, dim))
    base = rng.standard_normal(dim)
    if case["cluster"] != "none":
        m = max(1, n // 2)
        raw[:m] = _near_tie_rows(rng, base, m, case["cluster"])
    raw *= case["magnitude"]
    ids = [f"c{int(i):04d}" for i in rng.permutation(n)]
    scopes = [{"tenant": f"t{i % 3}", "end_user": f"u{i % 5}"} for i in range(n)]
    units = unit_float32_rows(raw.tolist(), dim)
    fine, staged = VectorIndex(dim, fine_rows=10**9), VectorIndex(dim, fine_rows=0)
    for index in (fine, staged):
        index.upsert_many(ids, units, scopes)
    query = (
        base + rng.standard_normal(dim) * 1e-4
        if case["query_on_cluster"]
        else rng.standard_normal(dim)
    )
    scope_all = {"tenant": "t1"} if case["filtered"] else {}
    for index in (fine, staged):
        check(index, raw, ids, scopes, query, case["k"], scope_all)
    a = _answer(fine, raw, ids, query, case["k"], scope_all)
    b = _answer(staged, raw, ids, query, case["k"], scope_all)
    assert [(np.float64(s).tobytes(), c) for s, c in a] == [
        (np.float64(s).tobytes(), c) for s, c in b
    ]


def test_the_fine_pass_sees_free_rows_and_several_runs() -> None:
    """Deletes leave free rows in the whole matrix, and a union of classes makes
    several runs: the fine pass over the gathered rows still gives the exact answer."""
    rng = np.random.default_rng(5)
    dim, n = 16, 200
    raw = rng.standard_normal((n, dim))
    ids = [f"c{i:04d}" for i in range(n)]
    scopes = [{"tenant": f"t{i % 4}"} for i in range(n)]
    index = VectorIndex(dim, fine_rows=10**9)
    index.upsert_many(ids, unit_float32_rows(raw.tolist(), dim), scopes)
    for i in range(0, n, 3):
        index.remove(ids[i])
    alive = [i for i in range(n) if i % 3]
    live_raw, live_ids = raw[alive], [ids[i] for i in alive]
    live_scopes = [scopes[i] for i in alive]
    for _ in range(5):
        query = rng.standard_normal(dim)
        for k in (1, 7, 50):
            check(index, live_raw, live_ids, live_scopes, query, k, {})
            q32 = unit_float64(query).astype(np.float32)
            classes = index.classes_in_scope({}, [{"tenant": "t0"}, {"tenant": "t2"}])
            found = [c.chunk_id for c in index.nearest(q32, k, classes)]
            rows = [j for j, s in enumerate(live_scopes) if s["tenant"] in ("t0", "t2")]
            expected = rerank(live_raw, live_ids, [live_ids[j] for j in rows], query, k)
            assert rerank(live_raw, live_ids, found, query, k) == expected


def test_the_fine_bound_holds_for_every_row_of_random_data() -> None:
    """Each fine score is within BF of the store's exact score, row by row; and a
    query its first code represents exactly (no residual left) is handled."""
    rng = np.random.default_rng(12)
    for dim in (3, 8, 384, 1536):
        raw = rng.standard_normal((500, dim)) * rng.choice([1e-200, 1.0, 1e200], (500, 1))
        units = unit_float32_rows(raw.tolist(), dim)
        codes = quantized.encode(units)
        grid = np.zeros(dim)
        grid[0] = 1.0
        for query in [unit_float64(rng.standard_normal(dim)) for _ in range(5)] + [grid]:
            code = quantized.encode_query(query.astype(np.float32))
            fine = quantized.fine_query(code)
            exact = exact_scores(list(raw), query)
            f = quantized.fine_scores(fine, codes.codes, codes.scale, codes.resid, codes.scale2)
            bound = quantized.bound_fine(
                code, fine, float(codes.err1.max()), float(codes.err2.max()), dim
            )
            assert np.all(np.abs(exact - f) <= bound)
            # Stage 2's precision, not stage 1's: the threshold keeps few rows.
            assert bound < quantized.bound1(code, float(codes.err1.max()), dim) / 10


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), dim=st.sampled_from([1, 7, 384]), rows=st.integers(0, 5))
def test_the_int8_kernel_is_exact_for_a_block_of_queries(seed: int, dim: int, rows: int) -> None:
    rng = np.random.default_rng(seed)
    block = rng.integers(-127, 128, (rows, dim)).astype(np.int8)
    queries = rng.integers(-127, 128, (2, dim)).astype(np.int8)
    expected = queries.astype(np.int64) @ block.astype(np.int64).T
    got = quantized.int_dots(queries, block)
    assert got.shape == (2, rows)
    assert np.array_equal(got, expected.astype(np.float64))


def test_dequantize_is_the_documented_formula_bit_for_bit() -> None:
    """``v = fl(fl(s·X) + fl(t·R))`` with X and R widened to float64 first: the bits a
    sidecar's recorded errors were measured on, whichever way the products are made."""
    rng = np.random.default_rng(9)
    for dim in (3, 384, 1536):
        raw = rng.standard_normal((300, dim)) * rng.choice([1e-200, 1.0, 1e200], (300, 1))
        codes = quantized.encode(unit_float32_rows(raw.tolist(), dim))
        high = codes.codes.astype(np.float64) * codes.scale[:, None]
        low = codes.resid.astype(np.float64) * codes.scale2[:, None]
        got = quantized.dequantize(codes.codes, codes.scale, codes.resid, codes.scale2)
        assert got.tobytes() == (high + low).tobytes()


def test_stage_two_in_blocks_keeps_every_true_top_k_member() -> None:
    """9,000 rows within a few ulps of each other all pass stage 1, so stage 2 scores
    them in blocks (index._STAGE2_ROWS): the candidates still hold the whole float64
    top k and its ties, against the brute-force oracle."""
    rng = np.random.default_rng(11)
    dim = 64
    base = rng.standard_normal(dim)
    crowd = _near_tie_rows(rng, base, 9000, "ulp")
    raw = np.vstack([crowd, rng.standard_normal((1000, dim))])
    ids = [f"c{i:05d}" for i in rng.permutation(raw.shape[0])]
    scopes = [{"tenant": f"t{i % 2}"} for i in range(raw.shape[0])]
    index = build(raw, ids, scopes)
    index.fine_rows = 0
    assert len(index.nearest(base.astype(np.float32), 10, None)) > 2 * 4096
    for k in (1, 10, 500):
        check(index, raw, ids, scopes, base, k, {})
        check(index, raw, ids, scopes, base, k, {"tenant": "t1"})


def test_stage_two_scores_the_survivors_on_their_int8_codes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Stage 2 re-scores stage 1's survivors with the fine score (two int8 kernel calls)
    and never dequantizes them to float64 rows (which cost more than the whole scan at a
    few dozen survivors); the answer is still the float64 brute force's."""
    rng = np.random.default_rng(21)
    dim, n = 64, 3000
    base = rng.standard_normal(dim)
    raw = np.vstack([_near_tie_rows(rng, base, 300, "small"), rng.standard_normal((n, dim))])
    ids = [f"c{i:05d}" for i in rng.permutation(raw.shape[0])]
    scopes = [{"tenant": f"t{i % 2}"} for i in range(raw.shape[0])]
    index = build(raw, ids, scopes)
    index.fine_rows = 0

    def refused(*_: object) -> None:
        raise AssertionError("stage 2 dequantized its survivors")

    monkeypatch.setattr(quantized, "dequantize", refused)
    for k in (1, 10, 100):
        check(index, raw, ids, scopes, base, k, {})
        check(index, raw, ids, scopes, base, k, {"tenant": "t0"})


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 12_000),
    k=st.integers(1, 40),
    distinct=st.sampled_from([1, 3, 50, 10**9]),
)
def test_the_stage_one_threshold_is_never_above_the_kth_score(
    seed: int, n: int, k: int, distinct: int
) -> None:
    """Stage 1's threshold (index._kth_floor): exactly the k-th largest score for a
    small array, at most it for a large one (block maxima), with duplicates."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, distinct, n).astype(np.float64) if distinct < 10**9 else rng.random(n)
    if n <= k:
        return
    kth = float(np.sort(scores)[-k])
    floor = index_module._kth_floor(scores, k)
    assert floor <= kth
    if n < index_module._BLOCK_ROWS * k:
        assert floor == kth


def test_a_top_k_crowded_into_one_block_of_stage_one_is_kept() -> None:
    """The true top k all in one block of stage 1's block maxima (rows i, i + m, …): the
    threshold falls to the other blocks' maxima and more rows survive, but the
    candidates still hold the whole float64 top k and its ties."""
    rng = np.random.default_rng(8)
    dim, n = 32, 8192
    m = n // index_module._BLOCKS
    base = rng.standard_normal(dim)
    raw = rng.standard_normal((n, dim))
    block = [3 + b * m for b in range(index_module._BLOCKS)]
    raw[block] = _near_tie_rows(rng, base, len(block), "small")
    ids = [f"c{i:05d}" for i in range(n)]
    scopes = [{"tenant": "t0"}] * n
    index = VectorIndex(dim, fine_rows=0)
    index.load_units(ids, unit_float32_rows(raw.tolist(), dim), [(("tenant", "t0"),)] * n)
    for k in (1, 10, 16, 30):
        check(index, raw, ids, scopes, base, k, {})
