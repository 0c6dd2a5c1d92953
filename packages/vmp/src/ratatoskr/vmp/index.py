"""Exact top-k search over Q16.16 vectors, fast enough to answer from memory.

The store keeps every vector in SQLite; this index holds an in-memory copy
(row = record_id, since records are append-only and numbered from 0) and
answers a query by one of two routes, both exact:

**Exact in float64** (dim ≤ ``WIDE_MAX_DIM``, magnitudes permitting). The index
keeps the stored integers as float64, one column per record, with each
record's ``s_i = Σx²`` as an extra row, so one vector-matrix product of
``(-2y, 1)`` gives ``key_i = s_i - 2·x_i·y`` — the squared distance less the
query's own ``Σy²``. Let ``A`` bound every stored ``|x|`` and ``Y`` the query's
``|y|``. Every term of that product (``-2·x·y`` and ``s_i``) is an integer, and
every partial sum of any subset of them is an integer of magnitude at most
``dim·(2AY + A²) ≤ dim·(A+Y)²``. When ``dim·(A+Y)² ≤ 2**53`` every such integer
is a float64, so each addition, multiplication or fused multiply-add the BLAS
performs — in whatever order, blocking or vector width — has an exactly
representable exact result and is therefore exact: the keys are the true
integers, with no error to bound. Q16.16 embeddings of magnitude ≤ 1 stay far
inside (dim 32 allows ``A + Y`` up to 2**24.5, i.e. values up to about ±180).

**Float32 prefilter + exact integer re-score** (larger dims, or magnitudes past
that limit):

1. *Prefilter* in floating point: one matrix-vector product gives an
   approximate distance ``a_i`` for every row, and a rigorous bound ``b_i`` on
   its error (dot-product rounding γ_D·Σ|x||y| ≤ γ_D·‖x‖‖y‖ by Cauchy–Schwarz,
   plus the float32 representation of both vectors and the float64 sums, with
   a wide safety margin; a float64 product of the exact integers, as the small
   dims use here, errs less than that). Let ``U`` be the k-th smallest
   ``a_i + b_i``: at least k rows have a true distance ≤ U, so every row of the
   true top k — ties included — has ``a_i - b_i ≤ U`` and survives as a
   candidate.
2. *Exact rescoring* of the candidates in integers: each difference
   ``d = m - q`` (|d| < 2**32) splits into limbs ``d = h·2**16 + l`` with
   ``0 ≤ l < 2**16``, so Σh², Σh·l and Σl² fit int64 for any dim ≤ 4096, and
   ``d² = h²·2**32 + h·l·2**17 + l²`` recombines into an exact (hi, lo) pair
   with ``total = hi·2**32 + lo``, ``0 ≤ lo < 2**32``. Candidates are ordered
   by (hi, lo, record_id) — exactly (distance, record_id).

Either way the floats never decide the answer, so results are bit-identical on
every machine, BLAS and SIMD library.

Kernels (measured side by side, ``benchmarks/vmp_bench.py`` and the README's VMP
section): the float64 route is one BLAS vector-matrix product over a matrix
stored one column per record (dim+1 × capacity), which streams long contiguous
rows. The float32 prefilter calls simsimd's dot product (one row per record):
it runs in the calling thread, whereas OpenBLAS spreads a product this size
over threads that busy-wait — on a busy 2-core machine that measured 3–10×
slower than one thread, while simsimd kept its single-thread speed. simsimd
multiplies in float32 and accumulates with FMA (or in float64), in some order:
the γ_D bound above holds for any order, with or without FMA.
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
_F64_EPS = 2.0**-53
_INV_SCALE = 1.0 / SCALE
_INV_SCALE_SQ = _INV_SCALE * _INV_SCALE
# Integers up to this magnitude are exact float64 values.
FLOAT64_EXACT = 2**53
# The widest dim served by the exact float64 route: beyond it the float64 matrix
# (twice the bytes of the float32 one) costs more to stream than the prefilter and
# re-score save (measured crossover between 32 and 64 at 10k records).
WIDE_MAX_DIM = 32
# Rows per block of the exact pass, so its int64 temporaries stay around 8 MiB.
_EXACT_BLOCK_ELEMENTS = 1 << 20

_S = TypeVar("_S", bound=np.generic)

Int32Matrix = npt.NDArray[np.int32]
Int64Array = npt.NDArray[np.int64]
Float32Matrix = npt.NDArray[np.float32]
Float64Array = npt.NDArray[np.float64]
Float64Matrix = npt.NDArray[np.float64]


def exact_distances(rows: Int32Matrix, query: Int64Array) -> tuple[Int64Array, Int64Array]:
    """Exact squared L2 distances of ``rows`` to ``query``.

    Returned as two int64 arrays (hi, lo) with distance = hi·2**32 + lo and 0 ≤ lo < 2**32.
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


def exact_in_float64(dim: int, max_row: int, max_query: int) -> bool:
    """Whether the float64 route is exact: ``dim·(A+Y)² ≤ 2**53`` (see the module docstring)."""
    return dim * (max_row + max_query) ** 2 <= FLOAT64_EXACT


@dataclass(frozen=True)
class IndexView:
    """The first ``count`` rows of the index, frozen for one search.

    ``wide`` (dim+1 × count, float64 integers, last row Σx²) is there when the index
    serves the exact float64 route, ``approx`` (count × dim, float32 real units)
    otherwise; ``max_abs`` bounds every stored |value|.
    """

    fixed: Int32Matrix
    norms: Float64Array
    squares: Float64Array
    max_abs: int
    wide: Float64Matrix | None
    approx: Float32Matrix | None

    def top_k(self, query: Sequence[int] | Int64Array, k: int) -> list[tuple[int, int]]:
        """The ``k`` nearest rows as (record_id, exact squared distance), ascending, ties by id."""
        count = self.fixed.shape[0]
        if count == 0 or k <= 0:
            return []
        k = min(k, count)
        q = np.asarray(query, dtype=np.int64)
        if self.wide is not None and exact_in_float64(q.shape[0], self.max_abs, _max_abs(q)):
            return _exact_wide(self.wide, q.astype(np.float64), k)  # exact: |q| ≤ 2**31
        few = count <= 2 * k
        candidates = np.arange(count, dtype=np.int64) if few else self.prefilter(q, k)
        hi, lo = exact_distances(self.fixed[candidates], q)
        if candidates.shape[0] > k:
            # Keep every candidate whose hi limb ties the k-th smallest, then order exactly.
            kth = np.partition(hi, k - 1)[k - 1]
            keep = np.flatnonzero(hi <= kth)
            candidates, hi, lo = candidates[keep], hi[keep], lo[keep]
        order = np.lexsort((candidates, lo, hi))[:k]
        return [(int(candidates[i]), (int(hi[i]) << 32) + int(lo[i])) for i in order.tolist()]

    def prefilter(self, q: Int64Array, k: int) -> Int64Array:
        """Every row that may belong to the top ``k`` of ``q`` (the prefilter's candidates)."""
        dim = q.shape[0]
        y = q.astype(np.float64) * _INV_SCALE  # exact: |q| < 2**31
        if self.wide is not None:
            # The exact integers, multiplied in float64 (scaling by 2**-32 is exact).
            dots = (q.astype(np.float64) @ self.wide[:-1]) * _INV_SCALE_SQ
        else:
            assert self.approx is not None
            # simsimd: one thread, SIMD, float32 products (see the module docstring).
            query = y.astype(np.float32)[None, :]
            dots = np.asarray(simsimd.cdist(query, self.approx, metric="dot"), np.float64)[0]
        y_sq = float(np.dot(y, y))
        y_norm = math.sqrt(y_sq)
        approx = self.squares - 2.0 * dots + y_sq
        # Dot product: γ_D + 2u (both vectors rounded to float32) times ‖x‖‖y‖, doubled by
        # the factor 2 in front of the dot; taken 2.5× with D+4 for margin. The second
        # term covers the float64 norms and sums (and dwarfs the last-ulp error of a ± b).
        dot_slack = 2.5 * (dim + 4) * _F32_EPS
        sum_slack = (dim + 8) * 8 * _F64_EPS
        bound = dot_slack * self.norms * y_norm + sum_slack * (self.norms + y_norm) ** 2
        upper = approx + bound
        threshold = np.partition(upper, k - 1)[k - 1]
        return np.flatnonzero(approx - bound <= threshold).astype(np.int64)


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
        self._reset(None)

    @property
    def exact_in_float(self) -> bool:
        """Whether this index keeps the float64 matrix of the exact route (dim ≤ WIDE_MAX_DIM)."""
        return self.dim <= WIDE_MAX_DIM

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
            # Slices stay valid: appends write past ``count`` or into a fresh array.
            return IndexView(
                self._fixed[:count],
                self._norms[:count],
                self._squares[:count],
                self._max_abs,
                None if self._wide is None else self._wide[:, :count],
                None if self._approx is None else self._approx[:count],
            )

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

    def _reset(self, epoch: int | None) -> None:
        self._epoch = epoch
        self._count = 0
        self._max_abs = 0
        self._fixed: Int32Matrix = np.empty((0, self.dim), dtype=np.int32)
        self._norms: Float64Array = np.empty(0, dtype=np.float64)
        self._squares: Float64Array = np.empty(0, dtype=np.float64)
        # Only the matrix of this dim's route is kept: ``wide`` one column per record
        # (BLAS then streams long rows), ``approx`` one row per record (simsimd's layout).
        self._wide: Float64Matrix | None = None
        self._approx: Float32Matrix | None = None
        if self.exact_in_float:
            self._wide = np.empty((self.dim + 1, 0), dtype=np.float64)
        else:
            self._approx = np.empty((0, self.dim), dtype=np.float32)

    def _append(self, rows: Int32Matrix) -> None:
        added = rows.shape[0]
        if added == 0:
            return
        needed = self._count + added
        if needed > self._fixed.shape[0]:
            capacity = max(needed, 2 * self._fixed.shape[0], 64)
            self._fixed = _grown(self._fixed, capacity, self._count)
            self._norms = _grown(self._norms, capacity, self._count)
            self._squares = _grown(self._squares, capacity, self._count)
            if self._wide is not None:
                self._wide = _grown_columns(self._wide, capacity, self._count)
            if self._approx is not None:
                self._approx = _grown(self._approx, capacity, self._count)
        part = slice(self._count, needed)
        self._fixed[part] = rows
        wide = rows.astype(np.int64)
        # int64 first: |-2**31| does not fit int32.
        self._max_abs = max(self._max_abs, int(np.abs(wide).max()))
        real = rows.astype(np.float64) * _INV_SCALE
        squares = np.einsum("ij,ij->i", real, real)
        self._squares[part] = squares
        self._norms[part] = np.sqrt(squares)
        if self._wide is not None:
            exact = wide.astype(np.float64)
            self._wide[: self.dim, part] = exact.T
            # Σx² as float64: exact whenever the float64 route may be taken (it is ≤ 2**53).
            self._wide[self.dim, part] = np.einsum("ij,ij->i", exact, exact)
        if self._approx is not None:
            self._approx[part] = rows.astype(np.float32) * np.float32(_INV_SCALE)
        self._count = needed


def _grown(array: npt.NDArray[_S], capacity: int, used: int) -> npt.NDArray[_S]:
    grown = np.empty((capacity, *array.shape[1:]), dtype=array.dtype)
    grown[:used] = array[:used]
    return grown


def _grown_columns(array: npt.NDArray[_S], capacity: int, used: int) -> npt.NDArray[_S]:
    grown = np.empty((array.shape[0], capacity), dtype=array.dtype)
    grown[:, :used] = array[:, :used]
    return grown


def _exact_wide(wide: Float64Matrix, y: Float64Array, k: int) -> list[tuple[int, int]]:
    dim = y.shape[0]
    coefficients = np.empty(dim + 1, dtype=np.float64)
    np.multiply(y, -2.0, out=coefficients[:dim])
    coefficients[dim] = 1.0
    keys = coefficients @ wide  # exact integers: Σx² - 2·x·y
    kth = np.partition(keys, k - 1)[k - 1] if keys.shape[0] > k else keys.max()
    candidates = np.flatnonzero(keys <= kth)  # every row tied with the k-th, too
    chosen = keys[candidates]
    order = np.lexsort((candidates, chosen))[:k]
    base = int(y @ y)  # exact: Σy² ≤ dim·Y² ≤ 2**53
    ids = candidates[order].tolist()
    return [(rid, int(key) + base) for rid, key in zip(ids, chosen[order].tolist(), strict=True)]


def _max_abs(q: Int64Array) -> int:
    return int(np.abs(q).max()) if q.shape[0] else 0
