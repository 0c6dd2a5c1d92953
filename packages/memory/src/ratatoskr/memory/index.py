"""The in-process vector index that answers searches exactly.

sqlite-vec is the durable index (its rows are one-to-one with the chunks), but
the x86_64 wheel is built without AVX and scans slower than numpy (docs/decisions.md), and its
metadata filters cannot express a ``scope_any`` union exactly. So every open
store keeps, beside the database, int8 codes of the unit vectors
(:mod:`ratatoskr.memory.quantized`: a quarter of float32's bytes, scanned by
simsimd's int8 kernel), grouped by scope class (:mod:`ratatoskr.memory.segments`);
a search reads only the rows its scope and filter select
(:mod:`ratatoskr.memory.selection`):

- the int8 pass keeps every row its proven error bound cannot exclude, both int8
  levels (codes and residual codes) re-score those, and the store re-ranks the
  survivors exactly in float64 (the proof is in :mod:`ratatoskr.memory.quantized`); a
  selection of at most ``FINE_ROWS`` rows takes the fine pass instead (both int8
  levels of every row against a two-level query code, one threshold: fewer calls).

The index knows nothing of SQLite; :mod:`ratatoskr.memory.sync` keeps it in step
with the database (``seq`` is the change counter it was built to).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence, Set
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from bifrost.memory.filters import MetadataFilter
from ratatoskr.memory import quantized
from ratatoskr.memory.records import unit_rows
from ratatoskr.memory.residency import BUDGET, Released
from ratatoskr.memory.segments import NO_ROWS, Rows, ScopeItems, scope_items
from ratatoskr.memory.selection import Selection
from ratatoskr.memory.sidecar import Image

__all__ = [
    "FINE_ROWS",
    "Candidate",
    "Rows",
    "ScopeItems",
    "VectorIndex",
    "scope_items",
]

Vector = npt.NDArray[np.float32]

# Past this many separate runs of rows a search gathers them instead of one kernel
# call per run (each call costs a few microseconds).
_MAX_RUNS = 48
# Up to this many rows in scope, the fine pass (both int8 levels of every row, one
# threshold) is cheaper than two stages: fewer calls, no dequantized gather, but
# twice the kernel's work per row (index_bench's data, interleaved: 7% faster at
# 100 rows, one end user's class; 3% at 200; slower from about 250; 30% at 1,000).
FINE_ROWS = 200
# Rows stage 2 gathers at once (int8 copies of their codes and residuals).
_STAGE2_ROWS = 4096

F64 = npt.NDArray[np.float64]
_NO_SCORES: F64 = np.zeros(0, dtype=np.float64)


# From this many scores per top-k row, stage 1 takes its threshold from the maxima of
# _BLOCKS-row blocks of its scores (see _kth_floor) instead of partitioning them all.
_BLOCK_ROWS = 256
_BLOCKS = 16


def _kth_floor(scores: F64, k: int) -> float:
    """A value at most the k-th largest of ``scores`` (more than ``k`` of them), close to
    it: exactly it for a small array; for a large one the k-th largest of the maxima
    of ``_BLOCKS``-row blocks (rows ``i, i + m, i + 2m, …``), k distinct scores at least
    that large, so the k-th largest score is at least as large. Stage 1 keeps every row
    within ``2·B1`` of it, a superset of what the exact k-th keeps (so the true top k
    is kept: :mod:`ratatoskr.memory.quantized`), at a quarter of a partition's cost on
    10,000 rows; rarely more than a few more rows."""
    count = scores.size
    if count < _BLOCK_ROWS * k:
        return float(np.partition(scores, count - k)[count - k])
    m = count // _BLOCKS  # at least 16·k blocks
    maxima = np.maximum.reduce(scores[: m * _BLOCKS].reshape(_BLOCKS, m), axis=0)
    return float(np.partition(maxima, m - k)[m - k])


def _best(scores: F64, k: int, bound: float) -> tuple[Rows, F64]:
    """The positions of ``scores`` within ``2·bound`` of their k-th largest (all of them
    when there are at most ``k``), best first, and those scores: one sort of a small
    array (a fine pass, or the survivors of stage 1) instead of a partition, a
    selection and a second sort."""
    # The methods, not np.argsort / np.searchsorted: no Python wrapper per call.
    ascending = scores.argsort()
    ranked = scores[ascending]
    if ranked.size > k:
        low = int(ranked.searchsorted(float(ranked[-k]) - 2.0 * bound))
        ascending, ranked = ascending[low:], ranked[low:]
    return ascending[::-1], ranked[::-1]


class Candidate(NamedTuple):
    """A row that may be in the top k, with its approximate score (a tuple: a search
    makes one per candidate, and a frozen dataclass costs several times as much)."""

    chunk_id: str
    score: float


class VectorIndex(Selection):
    """Int8 codes, filter columns and scope postings of the live chunks, searched
    exactly (not thread-safe by itself)."""

    def __init__(
        self,
        dim: int,
        capacity: int = 1024,
        *,
        fine_rows: int = FINE_ROWS,
        fields: Sequence[str] = (),
    ) -> None:
        super().__init__(dim, capacity, fields=fields)
        # Selections of at most this many rows take the fine pass (tests set 0 or a
        # large number to run one path or the other on the same rows).
        self.fine_rows = fine_rows
        # Mapped code arrays larger than this give back the pages searches read once
        # that many bytes of rows were read (see residency.py; tests set it small).
        self.map_budget = BUDGET
        self._released: list[Released] = []

    # -- writes ------------------------------------------------------------------------

    def upsert(self, chunk_id: str, unit: Vector, scope: dict[str, str]) -> None:
        """Insert or replace one chunk's vector and scope."""
        self.upsert_many([chunk_id], np.asarray(unit).reshape(1, -1), [scope])

    def upsert_many(
        self,
        ids: Sequence[str],
        units: npt.NDArray[np.floating],
        scopes: Sequence[dict[str, str]],
        records: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Insert or replace chunks (float32 unit rows, one per id), coded in one go;
        ``records`` (the stored records, one per id) give the filter columns' values."""
        if not ids:
            return
        self._version += 1
        codes = quantized.encode(units)
        self._note_errors(codes)
        # Each id's row is settled first (rows move as segments grow and holes are
        # filled), then every code is written at once to its id's final row: the
        # last occurrence of an id wins, as it would written one by one.
        last: dict[str, int] = {}
        for i, (chunk_id, scope) in enumerate(zip(ids, scopes, strict=True)):
            cls = self._class(scope_items(scope))
            row = self._row.get(chunk_id)
            if row is not None and int(self._class_of_row[row]) != cls:
                self.remove(chunk_id)
                row = None
            if row is None:
                row = self._append(cls)
                self._ids[row] = chunk_id
                self._row[chunk_id] = row
            last[chunk_id] = i
        count = len(last)
        rows = np.fromiter((self._row[c] for c in last), dtype=np.int64, count=count)
        src = np.fromiter(last.values(), dtype=np.int64, count=count)
        self._codes[rows] = codes.codes[src]
        self._resid[rows] = codes.resid[src]
        self._scale[rows] = codes.scale[src]
        self._scale2[rows] = codes.scale2[src]
        self._live[rows] = True
        if self.columns and records is not None:
            for chunk_id, i in last.items():
                self.columns.write(self._row[chunk_id], records[i])
        self._maybe_compact(len(ids))

    def remove(self, chunk_id: str) -> None:
        """Drop one chunk (absent ids are ignored)."""
        row = self._row.pop(chunk_id, None)
        if row is None:
            return
        self._version += 1
        cls = int(self._class_of_row[row])
        seg = self._segments[cls]
        last = seg.start + seg.count - 1
        if row != last:
            self._move(last, row)
        self._live[last] = False
        self._ids[last] = None
        if self.columns:
            self.columns.clear(last)
        seg.count -= 1
        if seg.count == 0:
            self._drop_class(cls)
        else:
            self._changed.add(cls)

    def load(self, ids: list[str], vectors: Vector, scopes: list[ScopeItems]) -> None:
        """Replace the whole content: ``vectors`` are raw float32 rows, one per id
        (normalised here), ``scopes`` as :func:`scope_items` gives them."""
        n = len(ids)
        units = np.empty_like(vectors)
        for start in range(0, n, 8192):
            units[start : start + 8192] = unit_rows(vectors[start : start + 8192])
        self.load_units(ids, units, scopes)

    def load_units(self, ids: list[str], units: Vector, scopes: list[ScopeItems]) -> None:
        """Replace the whole content with float32 unit rows, laid out class by class."""
        n = len(ids)
        order, classes = self._layout(scopes)
        self._reset(max(n, 16))
        for start in range(0, n, 8192):
            picked = order[start : start + 8192]
            codes = quantized.encode(units[picked])
            stop = start + picked.size
            self._store_block(start, stop, codes)
            self._note_errors(codes)
        self._lay_out(ids, order, classes)

    def load_coded(
        self,
        ids: list[str],
        arrays: list[npt.NDArray[Any]],
        scopes: list[ScopeItems],
        errors: tuple[float, float],
    ) -> None:
        """Replace the whole content with rows already coded in the order of ``ids``:
        ``arrays`` is ``[codes, resid, scale, scale2]`` as :func:`quantized.encode`
        gives them, ``errors`` the largest stage-1 and stage-2 errors among them.

        Consumes ``arrays`` (the caller keeps no other reference): each array is
        dropped once its rows are laid out class by class, so a rebuild holds one
        array twice at a time, never all of them.
        """
        n = len(ids)
        order, classes = self._layout(scopes)
        self._reset(max(n, 16))  # zeroed pages: resident only once written
        for dst in (self._codes, self._resid, self._scale, self._scale2):
            src = arrays.pop(0)
            np.take(src, order, axis=0, out=dst[:n])
            del src
        self._err1_max, self._err2_max = errors
        self._lay_out(ids, order, classes)

    def image(self) -> Image:
        """The whole index as a tight :class:`~ratatoskr.memory.sidecar.Image`
        (compacting it first when it has free rows)."""
        segments = sorted(self._segments.values(), key=lambda s: s.start)
        tight = self._end == len(self._row) and all(s.count == s.cap for s in segments)
        if not tight or any(a.start + a.cap != b.start for a, b in itertools.pairwise(segments)):
            self.compact()
            segments = sorted(self._segments.values(), key=lambda s: s.start)
        n = self._end
        return Image(
            self.dim,
            self.seq,
            self._codes[:n],
            self._resid[:n],
            self._scale[:n],
            self._scale2[:n],
            [str(i) for i in self._ids[:n]],
            [(s.items, s.count) for s in segments],
            self._err1_max,
            self._err2_max,
        )

    def adopt(self, image: Image) -> None:
        """Take over ``image``'s arrays as they are (memory-mapped ones stay mapped until
        the first write that needs room) and its ``seq``."""
        n = len(image.ids)
        self._reset(max(n, 1))
        if n:
            self._codes, self._resid = image.codes, image.resid
            self._scale, self._scale2 = image.scale, image.scale2
            self._cap = n
        self._live = np.ones(self._cap, dtype=bool)
        self._live[n:] = False
        self._ids = list[str | None](image.ids)
        self._row = dict(zip(image.ids, range(n), strict=True))
        classes: list[int] = []
        counts: list[int] = []
        start = 0
        for items, count in image.classes:
            classes.append(self._new_class(items, start, count, count))
            counts.append(count)
            start += count
        self._class_of_row = np.zeros(self._cap, dtype=np.int32)
        self._class_of_row[:n] = np.repeat(np.asarray(classes, dtype=np.int32), counts)
        self._end = n
        self._err1_max, self._err2_max = image.err1_max, image.err2_max
        self.seq = image.seq
        self._released = [
            r
            for arr in (self._codes, self._resid)
            if (r := Released.of(arr, self._version, self.map_budget)) is not None
        ]

    def _give_back(self, start: int, stop: int) -> None:
        """Hand the mapped pages of rows ``[start, stop)`` back to the kernel, while the
        index has not written since it adopted the map (see residency.py)."""
        for released in self._released:
            if not released.still_clean(self._version):
                self._released = []
                return
            released.read(start, stop)

    def _take(self, arr: npt.NDArray[np.int8], rows: Rows) -> npt.NDArray[np.int8]:
        """``arr[rows]``; from a released map, ascending rows spread wider than a
        budget's worth of the matrix are gathered that much at a time, each part's pages
        given back after it (the kernel maps megabytes around each scattered row: a few
        hundred stage-1 survivors mapped the whole residual array)."""
        block = max(1, self.map_budget // self.dim)
        if not self._released or rows.size < 2 or int(rows[-1]) - int(rows[0]) < block:
            return arr[rows]
        if not bool(np.all(rows[1:] >= rows[:-1])):
            return arr[rows]
        first = int(rows[0]) // block * block
        edges = np.arange(first, int(rows[-1]) + block + 1, block, dtype=np.int64)
        cuts = np.searchsorted(rows, edges).tolist()
        parts: list[npt.NDArray[np.int8]] = []
        for low, a, b in zip(edges.tolist(), cuts, cuts[1:], strict=False):
            if b > a:
                parts.append(arr[rows[a:b]])
                self._give_back(low, low + block)
        return np.concatenate(parts)

    def _run_dots(self, query: quantized.I8, start: int, stop: int) -> F64:
        """Stage-1 products of the rows ``[start, stop)``: a block at a time when the
        codes are a released map (so a whole-matrix scan maps one block at a time)."""
        block = max(1, self.map_budget // self.dim)
        if not self._released or stop - start <= block:
            return quantized.int_dots(query, self._codes[start:stop])
        parts: list[F64] = []
        for low in range(start, stop, block):
            high = min(stop, low + block)
            parts.append(quantized.int_dots(query, self._codes[low:high]))
            self._give_back(low, high)
        return np.concatenate(parts)

    # -- search -------------------------------------------------------------------------

    def search(
        self,
        query: Vector,
        k: int,
        scope_all: dict[str, str],
        scope_any: list[dict[str, str]],
        metadata_filter: MetadataFilter | None = None,
    ) -> list[Candidate]:
        """:meth:`nearest` over :meth:`classes_in_scope` of the filter, the classes of
        recent filters kept until a class is made or dropped (searches repeat filters);
        with a ``metadata_filter``, over the rows of those classes that pass it
        (:meth:`filtered_rows`), so the result is exact at any selectivity."""
        classes = self._classes(scope_all, scope_any)
        if metadata_filter is not None:
            return self.nearest_rows(query, k, self.filtered_rows(classes, metadata_filter))
        return self.nearest(query, k, classes)

    def _stage1(
        self, query: quantized.QueryCode, classes: Set[int] | None
    ) -> tuple[Rows | int, F64]:
        """Rows scanned and their stage-1 scores ``a``; the rows as the first row of
        their one run when they are one run of live rows (never made into an array)."""
        runs, rows = self._selection(classes)
        if not runs:
            return NO_ROWS, _NO_SCORES
        if len(runs) == 1:
            start, stop = runs[0]
            dots = self._run_dots(query.codes, start, stop)
            if rows is None:  # one run, every row live
                return start, dots * (query.scale * self._scale[start:stop])
            # The whole matrix, free rows among the live ones.
            return rows, dots[rows] * (query.scale * self._scale[rows])
        assert rows is not None
        if len(runs) <= _MAX_RUNS:
            dots = np.concatenate(
                [quantized.int_dots(query.codes, self._codes[a:b]) for a, b in runs]
            )
        else:
            dots = quantized.int_dots(query.codes, self._take(self._codes, rows))
        return rows, dots * (query.scale * self._scale[rows])

    def _fine(
        self, code: quantized.QueryCode, k: int, runs: list[tuple[int, int]], rows: Rows | None
    ) -> list[Candidate]:
        """The fine pass over a small selection (one run, or the gathered ``rows``)."""
        fine = quantized.fine_query(code)
        if rows is None:
            start, stop = runs[0]
            scores = quantized.fine_scores(
                fine,
                self._codes[start:stop],
                self._scale[start:stop],
                self._resid[start:stop],
                self._scale2[start:stop],
            )
        else:
            start = 0
            scores = quantized.fine_scores(
                fine, self._codes[rows], self._scale[rows], self._resid[rows], self._scale2[rows]
            )
        bound = quantized.bound_fine(code, fine, self._err1_max, self._err2_max, self.dim)
        order, ranked = _best(scores, k, bound)
        return self._candidates(order + start if rows is None else rows[order], ranked)

    def _candidates(self, rows: Rows, scores: F64) -> list[Candidate]:
        """Candidates of ``rows`` with their ``scores`` (in that order)."""
        ids = map(str, map(self._ids.__getitem__, rows.tolist()))
        return list(map(Candidate, ids, scores.tolist()))

    def nearest(self, query: Vector, k: int, classes: Set[int] | None) -> list[Candidate]:
        """Every row that may be in the exact top ``k`` of the selected classes (all
        classes when None): a superset of the true top k and its ties, best first by
        an approximate score (see :mod:`ratatoskr.memory.quantized`)."""
        code = quantized.encode_query(query)
        runs, gathered = self._selection(classes)
        if not runs:
            return []
        selected = runs[0][1] - runs[0][0] if gathered is None else gathered.size
        if selected <= self.fine_rows:
            found = self._fine(code, k, runs, gathered)
        else:
            scanned, scores = self._stage1(code, classes)
            found = self._narrow(code, k, scanned, scores)
        if self._released:
            self._give_back(runs[0][0], runs[-1][1])
        return found

    def nearest_rows(self, query: Vector, k: int, rows: Rows) -> list[Candidate]:
        """:meth:`nearest` over the given ``rows`` (a filtered selection)."""
        if rows.size == 0:
            return []
        code = quantized.encode_query(query)
        if rows.size <= self.fine_rows:
            found = self._fine(code, k, [], rows)
        else:
            dots = quantized.int_dots(code.codes, self._take(self._codes, rows))
            found = self._narrow(code, k, rows, dots * (code.scale * self._scale[rows]))
        if self._released:
            self._give_back(int(rows.min()), int(rows.max()) + 1)
        return found

    def _fine_at(self, fine: quantized.FineQuery, rows: Rows) -> F64:
        """The fine scores ``f`` of ``rows`` (gathered ``_STAGE2_ROWS`` at a time: a random
        direction over a million rows leaves many rows after stage 1)."""
        if rows.size > _STAGE2_ROWS:
            return np.concatenate(
                [
                    self._fine_at(fine, rows[i : i + _STAGE2_ROWS])
                    for i in range(0, rows.size, _STAGE2_ROWS)
                ]
            )
        return quantized.fine_scores(
            fine,
            self._take(self._codes, rows),
            self._scale[rows],
            self._take(self._resid, rows),
            self._scale2[rows],
        )

    def _narrow(
        self, code: quantized.QueryCode, k: int, rows: Rows | int, scores: F64
    ) -> list[Candidate]:
        """The two stages after the int8 scores ``scores`` of ``rows`` (an int: the run
        of rows from there): every row the proven bounds cannot exclude from the top
        ``k``, best first."""
        count = scores.size
        if count > k:
            b1 = quantized.bound1(code, self._err1_max, self.dim)
            keep = np.nonzero(scores >= _kth_floor(scores, k) - 2.0 * b1)[0]
            scores = scores[keep]
            picked = keep + rows if isinstance(rows, int) else rows[keep]
            if keep.size > k:
                # Stage 2: the fine scores of the survivors (two int8 kernel calls on
                # their codes and residuals, not their float64 rows dequantized).
                fine = quantized.fine_query(code)
                scores = self._fine_at(fine, picked)
                b2 = quantized.bound_fine(code, fine, self._err1_max, self._err2_max, self.dim)
                order, ranked = _best(scores, k, b2)
                return self._candidates(picked[order], ranked)
        else:
            picked = np.arange(rows, rows + count) if isinstance(rows, int) else rows
        order = np.argsort(-scores)
        return self._candidates(picked[order], scores[order])
