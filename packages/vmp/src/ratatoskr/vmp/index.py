"""Exact top-k search over Q16.16 vectors, fast enough to answer from memory.

The store keeps every vector in SQLite; this index holds an in-memory copy
(row = record_id, since records are append-only and numbered from 0) and
answers a query in two passes:

1. **Prefilter** in float32: one matrix-vector product gives an approximate
   distance ``a_i`` for every row, and a rigorous bound ``b_i`` on its error
   (dot-product rounding γ_D·Σ|x||y| ≤ γ_D·‖x‖‖y‖ by Cauchy–Schwarz, plus the
   float32 representation of both vectors and the float64 sums, with a wide
   safety margin). Let ``U`` be the k-th smallest ``a_i + b_i``: at least k rows
   have a true distance ≤ U, so every row of the true top k — ties included —
   has ``a_i - b_i ≤ U`` and survives as a candidate.
2. **Exact rescoring** of the candidates in integers: each difference
   ``d = m - q`` (|d| < 2**32) splits into limbs ``d = h·2**16 + l`` with
   ``0 ≤ l < 2**16``, so Σh², Σh·l and Σl² fit int64 for any dim ≤ 4096, and
   ``d² = h²·2**32 + h·l·2**17 + l²`` recombines into an exact (hi, lo) pair
   with ``total = hi·2**32 + lo``, ``0 ≤ lo < 2**32``. Candidates are ordered
   by (hi, lo, record_id) — exactly (distance, record_id).

The floats only ever decide which rows are rescored, never the answer, so
results are bit-identical on every machine and BLAS.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from ratatoskr.vmp.fixedpoint import MAX_DIM, SCALE

_F32_EPS = 2.0**-24  # unit roundoff of float32
_F64_EPS = 2.0**-53
_INV_SCALE = 1.0 / SCALE
# Rows per block of the exact pass, so its int64 temporaries stay around 8 MiB.
_EXACT_BLOCK_ELEMENTS = 1 << 20

_S = TypeVar("_S", bound=np.generic)

Int32Matrix = npt.NDArray[np.int32]
Int64Array = npt.NDArray[np.int64]
Float32Matrix = npt.NDArray[np.float32]
Float64Array = npt.NDArray[np.float64]


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


@dataclass(frozen=True)
class IndexView:
    """The first ``count`` rows of the index, frozen for one search."""

    fixed: Int32Matrix
    approx: Float32Matrix
    norms: Float64Array
    squares: Float64Array

    def top_k(self, query: Sequence[int], k: int) -> list[tuple[int, int]]:
        """The ``k`` nearest rows as (record_id, exact squared distance), ascending, ties by id."""
        count = self.fixed.shape[0]
        if count == 0 or k <= 0:
            return []
        k = min(k, count)
        q = np.asarray(query, dtype=np.int64)
        candidates = self._prefilter(q, k) if count > 2 * k else np.arange(count, dtype=np.int64)
        hi, lo = exact_distances(self.fixed[candidates], q)
        if candidates.shape[0] > k:
            # Keep every candidate whose hi limb ties the k-th smallest, then order exactly.
            kth = np.partition(hi, k - 1)[k - 1]
            keep = np.flatnonzero(hi <= kth)
            candidates, hi, lo = candidates[keep], hi[keep], lo[keep]
        order = np.lexsort((candidates, lo, hi))[:k]
        return [(int(candidates[i]), (int(hi[i]) << 32) + int(lo[i])) for i in order.tolist()]

    def _prefilter(self, q: Int64Array, k: int) -> Int64Array:
        dim = q.shape[0]
        y = q.astype(np.float64) * _INV_SCALE  # exact: |q| < 2**31
        y_sq = float(np.dot(y, y))
        y_norm = math.sqrt(y_sq)
        dots = (self.approx @ y.astype(np.float32)).astype(np.float64)
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
        self._count = 0
        self._fixed: Int32Matrix = np.empty((0, dim), dtype=np.int32)
        self._approx: Float32Matrix = np.empty((0, dim), dtype=np.float32)
        self._norms: Float64Array = np.empty(0, dtype=np.float64)
        self._squares: Float64Array = np.empty(0, dtype=np.float64)

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
                self._approx[:count],
                self._norms[:count],
                self._squares[:count],
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
            self._epoch = None
            self._reset(None)

    def _reset(self, epoch: int | None) -> None:
        self._epoch = epoch
        self._count = 0
        self._fixed = np.empty((0, self.dim), dtype=np.int32)
        self._approx = np.empty((0, self.dim), dtype=np.float32)
        self._norms = np.empty(0, dtype=np.float64)
        self._squares = np.empty(0, dtype=np.float64)

    def _append(self, rows: Int32Matrix) -> None:
        added = rows.shape[0]
        needed = self._count + added
        if needed > self._fixed.shape[0]:
            capacity = max(needed, 2 * self._fixed.shape[0], 64)
            self._fixed = _grown(self._fixed, capacity, self._count)
            self._approx = _grown(self._approx, capacity, self._count)
            self._norms = _grown(self._norms, capacity, self._count)
            self._squares = _grown(self._squares, capacity, self._count)
        part = slice(self._count, needed)
        self._fixed[part] = rows
        self._approx[part] = rows.astype(np.float32) * np.float32(_INV_SCALE)
        real = rows.astype(np.float64) * _INV_SCALE
        squares = np.einsum("ij,ij->i", real, real)
        self._squares[part] = squares
        self._norms[part] = np.sqrt(squares)
        self._count = needed


def _grown(array: npt.NDArray[_S], capacity: int, used: int) -> npt.NDArray[_S]:
    grown = np.empty((capacity, *array.shape[1:]), dtype=array.dtype)
    grown[:used] = array[:used]
    return grown
