"""Exact top-k search over Q16.16 vectors, fast enough to answer from memory.

The store keeps every vector in SQLite; this index holds an in-memory copy (row =
record_id: records are append-only and numbered from 0) and answers a query in two
passes. A float32 prefilter gives every row an approximate key within one rigorous
bound of its true key (:func:`prefilter_slack`), which tells the rows that may be in
the top k; those are re-scored exactly in integers (:func:`exact_in_int64`,
:func:`exact_distances`). Floats only choose which rows the second pass scores, so
results are bit-identical on every machine, BLAS and SIMD library. Up to
``WIDE_MAX_DIM`` the prefilter is one BLAS product over a matrix kept one column per
record; above it simsimd's single-threaded dot product (package README, *Decisions
and measurements*).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import simsimd

from ratatoskr.vmp.fixedpoint import MAX_DIM, SCALE

_F32_EPS = 2.0**-24  # unit roundoff of float32
_INV_SCALE = 1.0 / SCALE
# Sums of squares below this fit int64.
INT64_EXACT = 2**63
# The widest dim whose prefilter is the BLAS product over one column per record;
# above it simsimd's single-threaded dot product over one row per record.
WIDE_MAX_DIM = 32
# Rows per block of the int64 limb pass, so its temporaries stay around 8 MiB.
_EXACT_BLOCK_ELEMENTS = 1 << 20
# The prefilter's coefficients are ``fl32(-2·y) = fl32(q·(-2**-15))``: exact in float64.
_MINUS_TWO_Y = -2.0 / SCALE
# Up to this many candidates the exact re-score's order is sorted in Python.
_SORT_IN_PYTHON = 64
_ONE = [1.0]
# Raise a threshold this much (relative, then absolute) before float32 compares it.
_F32_ROUND_UP = 2.0**-22
_F32_TINY = 2.0**-126

_S = TypeVar("_S", bound=np.generic)

Int32Matrix = npt.NDArray[np.int32]
Int64Array = npt.NDArray[np.int64]
Float32Array = npt.NDArray[np.float32]
Float32Matrix = npt.NDArray[np.float32]
Float64Array = npt.NDArray[np.float64]
FloatArray = npt.NDArray[np.float32] | npt.NDArray[np.float64]


def exact_distances(rows: Int32Matrix, query: Int64Array) -> tuple[Int64Array, Int64Array]:
    """Exact squared L2 distances of ``rows`` to ``query``, for any magnitude.

    Returned as two int64 arrays (hi, lo) with distance = hi·2**32 + lo and 0 ≤ lo < 2**32.
    Each difference ``d`` (|d| < 2**32) splits into limbs ``d = h·2**16 + l`` with
    ``0 ≤ l < 2**16``: Σh², Σh·l and Σl² fit int64 for any D ≤ 4096, and recombine
    into the exact pair.
    """
    count = rows.shape[0]
    hi = np.empty(count, dtype=np.int64)
    lo = np.empty(count, dtype=np.int64)
    block = max(1, _EXACT_BLOCK_ELEMENTS // max(1, rows.shape[1]))
    for start in range(0, count, block):
        stop = min(count, start + block)
        diff = rows[start:stop].astype(np.int64) - query
        h = diff >> 16  # arithmetic shift: floor division, so l below is in [0, 2**16)
        low = diff & 0xFFFF
        sum_hh = np.einsum("ij,ij->i", h, h)
        sum_hl = np.einsum("ij,ij->i", h, low)
        sum_ll = np.einsum("ij,ij->i", low, low)
        # |Σhl|·2**17 < 2**61 and Σl² < 2**44 for dim ≤ 4096: the sum fits int64.
        tail = (sum_hl << 17) + sum_ll
        hi[start:stop] = sum_hh + (tail >> 32)
        lo[start:stop] = tail & 0xFFFFFFFF
    return hi, lo


def exact_in_int64(dim: int, max_row: int, max_query: int) -> bool:
    """Whether a plain int64 re-score is exact: ``dim·(A+Y)² < 2**63``.

    ``A`` bounds every stored ``|x|`` and ``Y`` the query's ``|y|`` (Q16.16 integers).
    Then every ``(x-y)²`` and every partial sum of them is a non-negative integer
    below 2**63; embeddings of magnitude ≤ 1 are far inside.
    """
    return dim * (max_row + max_query) ** 2 < INT64_EXACT


def prefilter_slack(dim: int, max_norm: float, query_norm: float) -> float:
    """``E``, the bound on every prefilter key's error: ``|k̃_i - K_i| ≤ E`` for every row.

    ``K_i = Σx² - 2·x·y`` (real units) is the squared distance less the query's own
    ``Σy²``, which does not change the order. Let ``u = 2**-24`` (float32 unit
    roundoff), ``D`` the dimension, ``N`` the largest stored norm ``‖x_i‖`` and
    ``‖y‖`` the query's. Values are multiples of ``2**-16`` within ±2**15, so
    rounding one to float32 (``x̂``, ``ŷ``) errs by at most ``u·|x|``. The key is a
    dot product of ``D + 1`` terms — ``-2ŷ_j·x̂_j`` and the row's float32 ``ŝ_i =
    fl(Σx²)`` (``|ŝ_i - Σx²| ≤ 1.01·u·‖x‖²`` for D ≤ 4096). Evaluated in float32 in
    any order, blocked, vectorised, with or without fused multiply-adds, it errs by
    at most ``γ_{D+1}·Σ|terms|`` with ``γ_n = n·u/(1 - n·u)`` and ``Σ|terms| ≤ ŝ_i +
    2‖ŷ‖‖x̂_i‖``; rounding the inputs moves ``-2x·y`` by at most ``2(2u + u²)‖x‖‖y‖``.
    With ``γ_{D+1} ≤ (D+1)·u·1.0003`` for D ≤ 4096:

        |k̃_i - K_i| ≤ (D + 4)·u·(‖x_i‖ + ‖y‖)² ≤ (D + 4)·u·(N + ‖y‖)²,

    and ``E`` is that taken 2.5 times, which also covers the float64 roundings of
    ``N``, ``‖y‖`` (``math.hypot`` of the query's integers times 2**-16: below one
    ulp) and the threshold arithmetic (each relative 2**-53). The dims above
    ``WIDE_MAX_DIM`` take ``k̃_i = s_i - 2·(x̂·ŷ)`` in float64 around a float32 dot
    product: fewer roundings, the same bound.
    """
    return 2.5 * (dim + 4) * _F32_EPS * (max_norm + query_norm) ** 2


@dataclass(frozen=True)
class IndexView:
    """The first ``count`` rows of the index, frozen for one search.

    ``wide`` (dim+1 × count float32, real units, last row Σx²) is the prefilter's
    matrix up to ``WIDE_MAX_DIM``; above it ``approx`` (count × dim float32, real
    units) with ``squares`` (Σx², float64). ``max_abs`` bounds every stored |value|,
    ``max_norm`` every stored norm (real units).
    """

    fixed: Int32Matrix
    max_abs: int
    max_norm: float
    wide: Float32Matrix | None
    approx: Float32Matrix | None
    squares: Float64Array | None

    def top_k(self, query: Sequence[int] | Int64Array, k: int) -> list[tuple[int, int]]:
        """The ``k`` nearest rows as (record_id, exact squared distance), ascending, ties by id."""
        count = self.fixed.shape[0]
        if count == 0 or k <= 0:
            return []
        k = min(k, count)
        q = np.asarray(query, dtype=np.int64)
        values = q.tolist()
        # Python's C loop over the list: cheaper than numpy calls at these sizes.
        largest = max(map(abs, values), default=0)
        if count <= 2 * k:
            candidates = np.arange(count)
        else:
            candidates = self._prefilter(q, k, math.hypot(*values) * _INV_SCALE)
        rows = self.fixed.take(candidates, axis=0)  # ``take``: a fraction of ``[candidates]``
        if exact_in_int64(q.shape[0], self.max_abs, largest):
            diff = rows - q  # int64: |d| < 2**32
            diff *= diff  # exact: every square, and every partial sum below, < 2**63
            distances = diff.sum(axis=1)
            if candidates.shape[0] <= _SORT_IN_PYTHON:
                # Few candidates (the usual case): Python's sort of (distance, id) pairs
                # costs less than the numpy calls that order them.
                ranked = sorted(zip(distances.tolist(), candidates.tolist(), strict=True))
                return [(rid, dist) for dist, rid in ranked[:k]]
            # The candidates ascend, so a stable order breaks ties by the lower record_id.
            order = distances.argsort(kind="stable")[:k]
            return list(zip(candidates[order].tolist(), distances[order].tolist(), strict=True))
        hi, lo = exact_distances(rows, q)
        if candidates.shape[0] > k:
            # Keep every candidate whose hi limb ties the k-th smallest, then order exactly.
            kth = np.partition(hi, k - 1)[k - 1]
            keep = np.flatnonzero(hi <= kth)
            candidates, hi, lo = candidates[keep], hi[keep], lo[keep]
        order = np.lexsort((candidates, lo, hi))[:k]
        return [(int(candidates[i]), (int(hi[i]) << 32) + int(lo[i])) for i in order.tolist()]

    def prefilter(self, q: Int64Array, k: int) -> Int64Array:
        """Every row that may belong to the top ``k`` of ``q`` (the prefilter's candidates)."""
        return self._prefilter(q, k, math.hypot(*q.tolist()) * _INV_SCALE)

    def _prefilter(self, q: Int64Array, k: int, query_norm: float) -> Int64Array:
        dim = q.shape[0]
        slack = prefilter_slack(dim, self.max_norm, query_norm)
        keys: FloatArray
        if self.wide is not None:
            # -2·fl32(y) and the 1 of the Σx² row; q·(-2**-15) is exact in float64, and the
            # conversion rounds it to float32 once. A list: dim ≤ WIDE_MAX_DIM here.
            coefficients = np.array([v * _MINUS_TWO_Y for v in q.tolist()] + _ONE, np.float32)
            keys = coefficients @ self.wide  # matmul: np.dot copies a strided matrix
        else:
            assert self.approx is not None and self.squares is not None
            # simsimd: one thread, SIMD, float32 products (OpenBLAS would spread a product
            # this size over threads that busy-wait).
            query = np.empty((1, dim), dtype=np.float32)
            np.multiply(q, _INV_SCALE, out=query[0])  # fl32(y)
            dots = np.asarray(simsimd.cdist(query, self.approx, metric="dot"), np.float64)[0]
            dots *= -2.0
            dots += self.squares
            keys = dots
        return _candidates(keys, k, slack)


def _candidates(keys: FloatArray, k: int, slack: float) -> Int64Array:
    """The rows with ``key ≤ T + 2·slack``, ``T`` the k-th smallest key.

    The k rows at or under ``T`` have ``K ≤ T + E``, so the k-th smallest true key is
    at most ``T + E``, and every row of the true top k — ties with the k-th included
    — has ``k̃ ≤ K + E ≤ T + 2E``.
    """
    kth = float(np.partition(keys, k - 1)[k - 1])
    # ``.nonzero()`` itself: ``np.flatnonzero`` adds a ravel and two Python calls.
    return (keys <= _raised(kth + 2.0 * slack)).nonzero()[0]


def _raised(value: float) -> float:
    """``value`` raised so that its float32 rounding (to nearest) is still at least ``value``:
    a comparison with float32 keys loses no candidate: raised by a relative 2**-22 and
    2**-126, against half an ulp at most lost by rounding to nearest."""
    return value + abs(value) * _F32_ROUND_UP + _F32_TINY


class ExactIndex:
    """The in-memory vectors of one store; rows are appended, never changed.

    ``epoch`` names the history the rows belong to: the store bumps it when a
    restore replaces the state, and the index then reloads from scratch.
    """

    def __init__(self, dim: int) -> None:
        if not 1 <= dim <= MAX_DIM:
            raise ValueError(f"dim must be within 1…{MAX_DIM}")
        self.dim = dim
        self._lock = threading.Lock()
        self._epoch: int | None = None
        self._last: IndexView | None = None
        self._reset(None)

    def current(self) -> tuple[int, IndexView] | None:
        """Every row held now with the history they belong to, for a caller that checks
        both against the file itself; None when the index holds no history yet."""
        with self._lock:
            if self._epoch is None:
                return None
            return self._epoch, self._view(self._count)

    def view(self, epoch: int, count: int, load: Callable[[int, int], Int32Matrix]) -> IndexView:
        """Rows ``0 … count-1`` of history ``epoch``; ``load(start, stop)`` fetches missing rows."""
        with self._lock:
            if self._epoch != epoch:
                self._reset(epoch)
            if self._count < count:
                rows = load(self._count, count)
                if rows.shape != (count - self._count, self.dim):
                    raise RuntimeError("index load returned the wrong number of rows")
                self._append(rows)
            return self._view(count)

    def append_if_next(self, epoch: int, record_id: int, fixed: Sequence[int]) -> None:
        """Add a just-committed record when it is exactly the next row; otherwise a later
        ``view`` loads it."""
        with self._lock:
            if self._epoch == epoch and self._count == record_id:
                self._append(np.asarray([fixed], dtype=np.int32))

    def invalidate(self) -> None:
        """Forget every row (the next view reloads)."""
        with self._lock:
            self._reset(None)

    def _view(self, count: int) -> IndexView:
        # Slices stay valid: appends write past ``count`` or into a fresh array. The
        # maxima may cover rows past ``count``: an upper bound is all they must be.
        # The view of every row is kept until the next append or reset: most searches
        # ask for it, and building one costs a fair part of a small search.
        last = self._last
        if last is not None and last.fixed.shape[0] == count:
            return last
        view = IndexView(
            self._fixed[:count],
            self._max_abs,
            self._max_norm,
            None if self._wide is None else self._wide[:, :count],
            None if self._approx is None else self._approx[:count],
            None if self._squares is None else self._squares[:count],
        )
        if count == self._count:
            self._last = view
        return view

    def _reset(self, epoch: int | None) -> None:
        self._epoch = epoch
        self._last = None
        self._count = 0
        self._max_abs = 0
        self._max_norm = 0.0
        self._fixed: Int32Matrix = np.empty((0, self.dim), dtype=np.int32)
        # Only the matrix of this dim's kernel is kept: ``wide`` one column per record
        # (BLAS then streams long rows), ``approx`` one row per record (simsimd's layout).
        self._wide: Float32Matrix | None = None
        self._approx: Float32Matrix | None = None
        self._squares: Float64Array | None = None
        if self.dim <= WIDE_MAX_DIM:
            self._wide = np.empty((self.dim + 1, 0), dtype=np.float32)
        else:
            self._approx = np.empty((0, self.dim), dtype=np.float32)
            self._squares = np.empty(0, dtype=np.float64)

    def _append(self, rows: Int32Matrix) -> None:
        added = rows.shape[0]
        if added == 0:
            return
        self._last = None  # its maxima may change, and a view of every row grows
        needed = self._count + added
        if needed > self._fixed.shape[0]:
            capacity = max(needed, 2 * self._fixed.shape[0], 64)
            self._fixed = _grown(self._fixed, capacity, self._count)
            if self._wide is not None:
                self._wide = _grown_columns(self._wide, capacity, self._count)
            if self._approx is not None and self._squares is not None:
                self._approx = _grown(self._approx, capacity, self._count)
                self._squares = _grown(self._squares, capacity, self._count)
        part = slice(self._count, needed)
        self._fixed[part] = rows
        # int64 first: |-2**31| does not fit int32.
        self._max_abs = max(self._max_abs, int(np.abs(rows.astype(np.int64)).max()))
        real = rows.astype(np.float64) * _INV_SCALE
        squares = np.einsum("ij,ij->i", real, real)
        self._max_norm = max(self._max_norm, math.sqrt(float(squares.max())))
        if self._wide is not None:
            self._wide[: self.dim, part] = real.T  # rounded to float32
            self._wide[self.dim, part] = squares
        if self._approx is not None and self._squares is not None:
            self._approx[part] = real
            self._squares[part] = squares
        self._count = needed


def _grown(array: npt.NDArray[_S], capacity: int, used: int) -> npt.NDArray[_S]:
    grown = np.empty((capacity, *array.shape[1:]), dtype=array.dtype)
    grown[:used] = array[:used]
    return grown


def _grown_columns(array: npt.NDArray[_S], capacity: int, used: int) -> npt.NDArray[_S]:
    grown = np.empty((array.shape[0], capacity), dtype=array.dtype)
    grown[:, :used] = array[:, :used]
    return grown
