"""Int8 codes of the index's unit vectors, and the error bounds that keep search exact.

Each row ``x`` (a float32 unit vector) is held as two int8 codes with one float64
scale each:

- **stage 1**: ``X = rint(x / s)`` with ``s = max|x_j| / 127``, so ``x̂ = s·X``;
- **stage 2**: the residual ``r = x − fl(s·X)`` coded the same way,
  ``R = rint(r / t)``, ``t = max|r_j| / 127``, and ``v = fl(fl(s·X) + fl(t·R))``.

with ``e1 = ‖x − x̂‖`` and ``e2 = ‖x − v‖`` recorded per row (computed in float64 and
inflated, see ``_inflate``). The query ``q`` (float32 unit) gets a stage-1 code
``Q``, ``s_q`` and ``e_q = ‖q − q̂‖`` the same way.

**What the bounds bound.** The store ranks by ``S``, the float64 cosine that
:func:`ratatoskr.memory.records.exact_scores` computes from the stored raw
embedding and the float64 unit query. Write ``q*`` and ``u*`` for the exact
(real-number) unit vectors of the query and the raw embedding. Then:

(a) ``|S − q*·u*| ≤ ε64 = (2d + 16)·2⁻⁵³``: normalising (a max-division, a sum
    of d squares, a square root, a division) and a d-term dot product in float64,
    each term of ``|m_j||q_j|`` summing to at most 1 (Higham's γ_n bounds).
    Clamping to [-1, 1] only moves ``S`` towards ``q*·u*``.
(b) ``‖q − q*‖ ≤ δq = 2⁻²³``: the float32 query is one rounding (relative 2⁻²⁴
    per element) of a float64 unit vector within ``(d/2 + 3)·2⁻⁵³`` of ``q*``.
(c) ``‖x − u*‖ ≤ δx = 2⁻²²``: a row is either that same one rounding of a float64
    unit vector, or (reloaded from vec0's float32) renormalised and rounded
    again: ``‖y/‖y‖ − u*‖ ≤ 2‖y − u*‖`` for unit ``u*``, so at most 3·2⁻²⁴ plus
    float64 noise.

**Stage 1.** ``D = Q·X`` is an exact integer (|D| ≤ 127²·d < 2³¹, accumulated
in int32 by the kernel and checked once against numpy, see :func:`int_dots`),
and ``a = fl(fl(s_q·s)·D)`` is within ``2·2⁻⁵³·|q̂·x̂|`` of ``q̂·x̂ = s_q·s·D``.
By the triangle and Cauchy–Schwarz inequalities::

    |q*·u* − q̂·x̂| ≤ |q*·u* − q·x| + |q·x − q̂·x̂|
                  ≤ ‖q* − q‖‖u*‖ + ‖q‖‖u* − x‖ + ‖q − q̂‖‖x‖ + ‖q̂‖‖x − x̂‖
                  ≤ δq + (1 + δq)·δx + e_q·(1 + δx) + (‖q‖ + e_q)·e1

so ``|S − a| ≤ B1 = σ + e_q·(1 + δx) + (‖q‖ + e_q)·max e1`` with
``σ = δq + 2δx + (2d + 48)·2⁻⁵³`` (ε64, the rounding of ``a`` and of the
comparisons below, all ≤ 2⁻⁵³ per unit of magnitude ≤ 4). B1 is computed rounded
up (``_inflate``).

**Why no true top-k member is lost.** Let ``T`` be the k-th largest ``a − B1``
over the in-scope rows. The k rows attaining it have ``S ≥ a − B1 ≥ T``, so the
k-th largest ``S`` is ≥ T, and every member of the true top k (score descending,
chunk_id ascending; ties included whichever way they break) has ``S ≥ T``,
hence ``a + B1 ≥ S ≥ T``. Keeping every row with ``a ≥ T − B1`` (that is
``a ≥ a_(k) − 2·B1``) therefore keeps the whole true top k, and every row tied
with its last member. With at most k in-scope rows, all are kept.

**Stage 2** re-scores only those rows with the fine score ``f`` below (two int8
kernel calls on their codes and residuals; dequantizing them to float64 rows ``v``
cost more than the scan at a few dozen survivors): ``|S − f| ≤ BF``, whose
precision is stage 2's (``BF`` is ``‖q‖·max e2`` plus terms of ~``e_q``/100), and the
same argument on ``f − BF`` over the survivors keeps the true top k again: the k
rows attaining the k-th largest ``f − BF`` are in scope, and every true top-k member
survived stage 1. The maxima of ``e1`` and ``e2`` are over every row the index ever
coded (a bound for a larger error is still a bound). What survives (k rows plus
those within ~4·10⁻⁵ of the k-th at 384 dims) goes to the store's exact float64
re-rank, which decides the order.

**The fine pass** (small selections: one call per matrix instead of two stages).
The query's residual ``q − fl(s_q·Q)`` is coded too, ``Q₂ = rint(·/t_q)``, so
``q̃ = s_q·Q + t_q·Q₂`` is within ``e_f = ‖q − q̃‖`` of ``q`` (computed in float64,
rounded up; ~``e_q``/100). The int8 kernel gives the exact integers ``Q·X``,
``Q₂·X``, ``Q·R``, ``Q₂·R`` of every row, and
``f = fl(s·fl(s_q·Q·X + t_q·Q₂·X) + t·fl(s_q·Q·R + t_q·Q₂·R))`` approximates
``q̃·(s·X + t·R)`` with ``s·X + t·R`` the real dequantized row, which is within
``4u`` of the float64 ``v`` whose ``e2`` was measured (``u = 2⁻⁵³``), so within ``e2 + 4u`` of
``x``, and of norm at most ``M_x = 1 + δx + e2``. Then
``|q·x − q̃·(sX + tR)| ≤ ‖q‖·(e2 + 4u) + e_f·M_x``, and ``f`` is at most four
roundings (γ₄ ≤ 8u relative) from it, summed over four terms of magnitudes bounded
by ``(‖q̂‖ + ‖t_qQ₂‖)(‖x̂‖ + ‖tR‖) ≤ M = (‖q‖ + 2e_q + e_f)(1 + δx + 2e1 + e2)``
(Cauchy–Schwarz on each term). So ``|S − f| ≤ BF = σF + ‖q‖·max e2 + e_f·M_x + 8u·M``
with ``σF = δq + 2δx + (2d + 96)·u`` (ε64, the ``4u`` terms and the comparison), and
the argument of stage 1 on ``f − BF`` keeps the true top k: one threshold over the
whole selection, with stage 2's precision. It reads every row's codes and residuals
(twice stage 1's kernel work), so the index takes it for small selections only
(``ratatoskr.memory.index.FINE_ROWS``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import simsimd

I8 = npt.NDArray[np.int8]
F64 = npt.NDArray[np.float64]

DELTA_Q = 2.0**-23
DELTA_X = 2.0**-22
_U64 = 2.0**-53
# Larger than any relative error of a float64 norm of <= 2**22 terms, so an inflated
# computed error bounds the real one.
_REL = 2.0**-30
_ABS = 2.0**-40


def _inflate(value: F64 | float) -> F64:
    """A computed non-negative error rounded up past its float64 computation error."""
    out: F64 = np.asarray(value, dtype=np.float64) * (1.0 + _REL) + _ABS
    return out


def sigma1(dim: int) -> float:
    """The constant part of the stage-1 bound (see the module docstring)."""
    return float(DELTA_Q + 2 * DELTA_X + (2 * dim + 48) * _U64)


def _code(x: F64) -> tuple[I8, F64]:
    """Per-row int8 code and scale of the rows of ``x`` (scale 0 for a zero row)."""
    top = np.max(np.abs(x), axis=1)
    scale = top / 127.0
    safe = np.where(scale > 0, scale, 1.0)
    codes = np.clip(np.rint(x / safe[:, None]), -127, 127).astype(np.int8)
    return codes, scale


@dataclass(frozen=True)
class Codes:
    """The codes of a block of rows (see the module docstring)."""

    codes: I8
    scale: F64
    err1: F64
    resid: I8
    scale2: F64
    err2: F64


def dequantize(codes: I8, scale: F64, resid: I8, scale2: F64) -> F64:
    """``v = fl(fl(s·X) + fl(t·R))`` row by row: element-wise IEEE operations only, so
    a row gives the same bits wherever it sits (at encoding and at search)."""
    # In place, two temporaries instead of four: the same operations, the same bits
    # (widening inside a mixed int8 × float64 product is slower: a buffered cast).
    out: F64 = codes.astype(np.float64)
    out *= scale[:, None]
    low = resid.astype(np.float64)
    low *= scale2[:, None]
    out += low
    return out


def encode(units: npt.NDArray[np.floating]) -> Codes:
    """Codes of float32 unit rows (``m × d``)."""
    x = np.asarray(units, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError("encode takes a 2-d block of rows")
    codes, scale = _code(x)
    approx = codes.astype(np.float64) * scale[:, None]
    err1 = _inflate(np.linalg.norm(x - approx, axis=1))
    resid, scale2 = _code(x - approx)
    err2 = _inflate(np.linalg.norm(x - dequantize(codes, scale, resid, scale2), axis=1))
    return Codes(codes, scale, err1, resid, scale2, err2)


class QueryCode(NamedTuple):
    """A float32 unit query as stage 1 and stage 2 use it (a tuple: every search makes
    one, and a frozen dataclass costs several times as much to make)."""

    exact: F64  # the float32 query, as float64
    codes: I8
    scale: float
    err: float  # ‖q − q̂‖, rounded up
    norm: float  # ‖q‖, rounded up
    low: F64  # q − fl(s_q·Q), what the fine pass codes again


def encode_query(query: npt.NDArray[np.floating]) -> QueryCode:
    """The query's code: few, vector-wide numpy calls (this runs once per search)."""
    q = np.asarray(query, dtype=np.float64)
    scale = float(np.maximum.reduce(np.abs(q))) / 127.0
    # Any rounding of q / s gives valid codes: the error is measured from them below.
    codes = np.rint(q * (1.0 / scale)).astype(np.int8)
    diff = q - codes * scale
    err = _up(math.sqrt(float(diff @ diff)))
    norm = _up(math.sqrt(float(q @ q)))
    return QueryCode(q, codes, scale, err, norm, diff)


class FineQuery(NamedTuple):
    """The query's two int8 levels for the fine pass (see the module docstring)."""

    codes: I8  # 2 × d: Q, then Q₂
    weights: F64  # [s_q, t_q]
    err: float  # e_f = ‖q − q̃‖, rounded up


def fine_query(query: QueryCode) -> FineQuery:
    """The residual level of ``query``'s code, for :func:`fine_scores`."""
    low = query.low
    scale2 = float(np.maximum.reduce(np.abs(low))) / 127.0
    safe = scale2 if scale2 > 0 else 1.0
    # Any rounding gives valid codes (the error is measured from them); bounded so
    # every code stays within the ±127 the kernel's exactness check covers.
    level = np.rint(low * (1.0 / safe))
    np.minimum(np.maximum(level, -127.0, out=level), 127.0, out=level)
    codes = np.empty((2, low.size), dtype=np.int8)
    codes[0] = query.codes
    codes[1] = level  # integral values within ±127: the cast is exact
    rest = low - level * scale2
    err = _up(math.sqrt(float(rest @ rest)))
    return FineQuery(codes, np.array([query.scale, scale2], dtype=np.float64), err)


def fine_scores(fine: FineQuery, codes: I8, scale: F64, resid: I8, scale2: F64) -> F64:
    """``f`` of every row (C-contiguous ``codes`` and ``resid``, with their scales)."""
    high = fine.weights @ int_dots(fine.codes, codes)
    low = fine.weights @ int_dots(fine.codes, resid)
    out: F64 = scale * high + scale2 * low
    return out


def bound_fine(
    query: QueryCode, fine: FineQuery, err1_max: float, err2_max: float, dim: int
) -> float:
    """``BF``: every fine score is within it of the store's exact score."""
    m_x = 1 + DELTA_X + err2_max
    m = (query.norm + 2 * query.err + fine.err) * (1 + DELTA_X + 2 * err1_max + err2_max)
    sigma = DELTA_Q + 2 * DELTA_X + (2 * dim + 96) * _U64
    return _up(sigma + query.norm * err2_max + fine.err * m_x + 8 * _U64 * m)


def _up(value: float) -> float:
    """:func:`_inflate` of one Python float."""
    return value * (1.0 + _REL) + _ABS


def bound1(query: QueryCode, err1_max: float, dim: int) -> float:
    """``B1``: every stage-1 score is within it of the store's exact score."""
    return _up(sigma1(dim) + query.err * (1 + DELTA_X) + (query.norm + query.err) * err1_max)


def _numpy_dots(query: I8, rows: I8) -> F64:
    out: F64 = (query.astype(np.int64) @ rows.astype(np.int64).T).astype(np.float64)
    return out


@functools.cache
def _kernel_is_exact(dim: int) -> bool:
    """Whether simsimd's int8 dot product is exact at ``dim`` on this CPU: checked once
    on the worst case (every product ±127², all of one sign, then alternating)."""
    if 127 * 127 * dim >= 2**31:
        return False
    # Deterministic mixed rows (numpy.random would cost a reopen its import).
    mixed = ((np.arange(6 * dim, dtype=np.int64).reshape(6, dim) * 37 + 11) % 255 - 127).astype(
        np.int8
    )
    rows = np.vstack([np.full(dim, 127, dtype=np.int8), np.full(dim, -127, dtype=np.int8), mixed])
    query = np.full(dim, 127, dtype=np.int8)
    query[1::2] = -127
    for q in (query, np.full(dim, 127, dtype=np.int8), rows[2]):
        got = np.asarray(simsimd.cdist(q[None, :], rows, metric="dot"), dtype=np.float64)[0]
        if not np.array_equal(got, _numpy_dots(q, rows)):
            return False
    return True


def int_dots(query: I8, rows: I8) -> F64:
    """``rows @ query`` exactly (as float64 integers); ``rows`` C-contiguous. A 2-d
    ``query`` (``m × d``) gives the ``m × n`` products of each of its rows."""
    if rows.shape[0] == 0:
        return np.zeros((*query.shape[:-1], 0), dtype=np.float64)
    if _kernel_is_exact(rows.shape[1]):
        block = query if query.ndim == 2 else query[None, :]
        out: F64 = np.asarray(simsimd.cdist(block, rows, metric="dot"))
        return out if query.ndim == 2 else out[0]
    return _numpy_dots(query, rows)
