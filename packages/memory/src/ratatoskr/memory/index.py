"""The in-process vector index that answers searches exactly.

sqlite-vec is the durable index (its rows are one-to-one with the chunks), but
the x86_64 wheel is built without AVX and scans 3–7× slower than numpy, and its
metadata filters cannot express a ``scope_any`` union exactly. So every open
store keeps, beside the database, int8 codes of the unit vectors
(:mod:`ratatoskr.memory.quantized`: a quarter of float32's bytes, scanned by
simsimd's int8 kernel) and posting lists from each scope ``(axis, value)`` to the
**scope classes** holding it (a class: all chunks with one exact scope):

- rows are grouped by class: each class owns one contiguous **segment** of the
  code matrix, and classes are laid out ordered by tenant, group, agent and end
  user, so one tenant's classes sit side by side after a load or a compaction;
- a scoped search resolves the filter on the posting lists of classes (set
  algebra over a few classes, not over rows: ``scope_all`` intersects, each
  ``scope_any`` member intersects, the members unite) and scans only the
  segments of the selected classes — contiguous memory, cost following the
  in-scope set, and exact however selective the scope;
- the int8 pass keeps every row its proven error bound cannot exclude, the
  residual code re-scores those, and the store re-ranks the survivors exactly in
  float64 (the proof is in :mod:`ratatoskr.memory.quantized`); a selection of at
  most ``FINE_ROWS`` rows takes the fine pass instead (both int8 levels of every
  row against a two-level query code, one threshold: fewer calls).

A class that outgrows its segment moves to the end of the matrix with room to
grow (or grows in place when it is already last); a delete moves the segment's
last row into the hole. The space left behind is reclaimed by a compaction once
it passes a third of the matrix. The index knows nothing of SQLite;
:mod:`ratatoskr.memory.sync` keeps it in step with the database (``seq`` is the
change counter it was built to).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence, Set
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from bifrost.memory.filters import MetadataFilter
from ratatoskr.memory import quantized
from ratatoskr.memory.filtered import FilterColumns
from ratatoskr.memory.quantized import Codes
from ratatoskr.memory.sidecar import Image

Vector = npt.NDArray[np.float32]
Rows = npt.NDArray[np.int64]
ScopeItems = tuple[tuple[str, str], ...]
_FilterKey = tuple[ScopeItems, tuple[ScopeItems, ...]]

# The order classes are laid out in: one tenant's classes end up adjacent.
_LAYOUT_AXES = ("tenant", "group", "agent_self", "end_user")
# Past this many separate runs of rows a search gathers them instead of one kernel
# call per run (each call costs a few microseconds).
_MAX_RUNS = 48
_MIN_SEGMENT = 4
# Up to this many rows in scope, the fine pass (both int8 levels of every row, one
# threshold) is cheaper than two stages: fewer calls, no dequantized gather, but
# twice the kernel's work per row (index_bench's data, interleaved: 7% faster at
# 100 rows, one end user's class; 3% at 200; slower from about 250; 30% at 1,000).
FINE_ROWS = 200


def _room(count: int) -> int:
    """The free rows a compaction between writes leaves a class of ``count`` rows."""
    return max(_MIN_SEGMENT, count // 4)


F64 = npt.NDArray[np.float64]
_NO_ROWS: Rows = np.zeros(0, dtype=np.int64)
_NO_SCORES: F64 = np.zeros(0, dtype=np.float64)


def scope_items(scope: dict[str, str]) -> ScopeItems:
    """A scope as the sorted ``(axis, value)`` pairs the index keeps."""
    return tuple(sorted(scope.items()))


def _layout_key(items: ScopeItems) -> tuple[tuple[str, ...], ScopeItems]:
    values = dict(items)
    return tuple(values.get(axis, "") for axis in _LAYOUT_AXES), items


class Candidate(NamedTuple):
    """A row that may be in the top k, with its approximate score (a tuple: a search
    makes one per candidate, and a frozen dataclass costs several times as much)."""

    chunk_id: str
    score: float


def unit_float64(values: Sequence[float] | npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
    """``values / ‖values‖`` in float64, scaled first so that neither huge (1e308) nor
    subnormal (5e-324) components overflow or vanish. ``values`` must have a non-zero
    finite component (bifrost's validation guarantees it)."""
    v = np.asarray(values, dtype=np.float64)
    v = v / np.max(np.abs(v))
    out: npt.NDArray[np.float64] = v / np.linalg.norm(v)
    return out


def unit_float32(values: Sequence[float] | npt.NDArray[np.floating]) -> Vector:
    """:func:`unit_float64` rounded to float32 (what vec0 holds and the index codes)."""
    out: Vector = unit_float64(values).astype(np.float32)
    return out


class _Segment:
    """The rows ``[start, start + count)`` of one scope class, room up to ``cap``;
    ``kept`` is what it added to the index's running count of kept rows when last
    counted (see ``VectorIndex.kept_rows``)."""

    __slots__ = ("cap", "count", "items", "kept", "start")

    def __init__(self, items: ScopeItems, start: int, count: int, cap: int) -> None:
        self.items, self.start, self.count, self.cap = items, start, count, cap
        self.kept = 0


class VectorIndex:
    """Int8 codes and scope postings of the live chunks (not thread-safe by itself)."""

    def __init__(
        self,
        dim: int,
        capacity: int = 1024,
        *,
        fine_rows: int = FINE_ROWS,
        fields: Sequence[str] = (),
    ) -> None:
        self.dim = dim
        # The declared filterable fields' values, row-aligned (moved with the codes).
        self.columns = FilterColumns(fields)
        # Selections of at most this many rows take the fine pass (tests set 0 or a
        # large number to run one path or the other on the same rows).
        self.fine_rows = fine_rows
        self.seq = 0
        self._allocate(max(capacity, 16))
        self._end = 0  # rows [0, end) are segments; past it, free room
        self._unchecked = 0  # rows written since _maybe_compact last looked
        # Σ seg.kept over the segments, and the classes changed since it was counted.
        self._kept = 0
        self._changed: set[int] = set()
        self._ids: list[str | None] = []
        self._row: dict[str, int] = {}
        self._class_of_row: npt.NDArray[np.int32] = np.zeros(self._cap, dtype=np.int32)
        self._segments: dict[int, _Segment] = {}
        self._class_id: dict[ScopeItems, int] = {}
        self._next_class = 0
        self._postings: dict[tuple[str, str], set[int]] = {}
        # The largest stage-1 and stage-2 errors of any row ever coded (bounds use them).
        self._err1_max = 0.0
        self._err2_max = 0.0
        # Layout version, and the scans of recent selections at some version.
        self._version = 0
        self._selections: dict[
            frozenset[int] | None, tuple[int, list[tuple[int, int]], Rows | None]
        ] = {}
        # Version of the postings (classes made or dropped), and the classes of recent
        # filters at some version: a search's filter is resolved once per class change.
        self._classes_version = 0
        self._filters: dict[_FilterKey, tuple[int, frozenset[int] | None]] = {}

    def _allocate(self, cap: int) -> None:
        self._cap = cap
        self._codes = np.zeros((cap, self.dim), dtype=np.int8)
        self._resid = np.zeros((cap, self.dim), dtype=np.int8)
        self._scale = np.zeros(cap, dtype=np.float64)
        self._scale2 = np.zeros(cap, dtype=np.float64)
        self._live = np.zeros(cap, dtype=bool)
        self.columns.allocate(cap)

    def _row_arrays(self) -> list[npt.NDArray[Any]]:
        """Every per-row array a row's move carries (codes, scales, filter columns)."""
        return [self._codes, self._resid, self._scale, self._scale2, *self.columns.arrays]

    def __len__(self) -> int:
        return len(self._row)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._row

    def row_of(self, chunk_id: str) -> int | None:
        """The row holding ``chunk_id`` now (rows move on writes), or None."""
        return self._row.get(chunk_id)

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
            block = vectors[start : start + 8192].astype(np.float64)
            block /= np.max(np.abs(block), axis=1, keepdims=True)
            block /= np.linalg.norm(block, axis=1, keepdims=True)
            units[start : start + 8192] = block
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

    @staticmethod
    def _layout(scopes: list[ScopeItems]) -> tuple[Rows, list[tuple[ScopeItems, int]]]:
        """The rows in layout order, and the classes in that order with their counts."""
        class_of: dict[ScopeItems, list[int]] = {}
        for i, items in enumerate(scopes):
            class_of.setdefault(items, []).append(i)
        ordered = sorted(class_of, key=_layout_key)
        order = np.fromiter(
            (i for items in ordered for i in class_of[items]), dtype=np.int64, count=len(scopes)
        )
        return order, [(items, len(class_of[items])) for items in ordered]

    def _lay_out(self, ids: list[str], order: Rows, classes: list[tuple[ScopeItems, int]]) -> None:
        """Ids, rows and segments of rows just stored in layout ``order``."""
        n = len(ids)
        self._ids = [ids[int(i)] for i in order]
        self._row = {chunk_id: row for row, chunk_id in enumerate(self._ids) if chunk_id}
        start = 0
        for items, count in classes:
            cls = self._new_class(items, start, count, count)
            self._class_of_row[start : start + count] = cls
            start += count
        self._live[:n] = True
        self._end = n

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

    # -- layout ------------------------------------------------------------------------

    def _reset(self, cap: int) -> None:
        self._version += 1
        self._classes_version += 1
        self._allocate(cap)
        self._class_of_row = np.zeros(cap, dtype=np.int32)
        self._end = 0
        self._ids = []
        self._row = {}
        self._segments = {}
        self._class_id = {}
        self._postings = {}
        self._kept = 0
        self._changed = set()
        self._err1_max = 0.0
        self._err2_max = 0.0

    def _note_errors(self, codes: Codes) -> None:
        self._err1_max = max(self._err1_max, float(codes.err1.max()))
        self._err2_max = max(self._err2_max, float(codes.err2.max()))

    def _store_block(self, start: int, stop: int, codes: Codes) -> None:
        self._codes[start:stop] = codes.codes
        self._resid[start:stop] = codes.resid
        self._scale[start:stop] = codes.scale
        self._scale2[start:stop] = codes.scale2

    def _move(self, src: int, dst: int) -> None:
        for arr in self._row_arrays():
            arr[dst] = arr[src]
        self._class_of_row[dst] = self._class_of_row[src]
        moved = self._ids[src]
        self._ids[dst] = moved
        if moved is not None:
            self._row[moved] = dst

    def _new_class(self, items: ScopeItems, start: int, count: int, cap: int) -> int:
        self._classes_version += 1
        cls = self._next_class
        self._next_class += 1
        self._class_id[items] = cls
        self._segments[cls] = _Segment(items, start, count, cap)
        self._changed.add(cls)
        for item in items:
            self._postings.setdefault(item, set()).add(cls)
        return cls

    def _class(self, items: ScopeItems) -> int:
        cls = self._class_id.get(items)
        if cls is None:
            start = self._reserve(_MIN_SEGMENT)
            cls = self._new_class(items, start, 0, _MIN_SEGMENT)
        return cls

    def _drop_class(self, cls: int) -> None:
        self._classes_version += 1
        seg = self._segments.pop(cls)
        self._kept -= seg.kept
        self._changed.discard(cls)
        del self._class_id[seg.items]
        for item in seg.items:
            members = self._postings.get(item)
            if members is not None:
                members.discard(cls)
                if not members:
                    del self._postings[item]
        if seg.start + seg.cap == self._end:
            self._end = seg.start

    def _reserve(self, rows: int) -> int:
        """``rows`` free rows at the end of the matrix, growing it if need be."""
        start = self._end
        if start + rows > self._cap:
            # Grow by a quarter: doubling 100k rows twice over would briefly need far more.
            self._grow(start + rows + (start + rows) // 4 + 1024)
        self._end = start + rows
        if len(self._ids) < self._end:
            self._ids.extend([None] * (self._end - len(self._ids)))
        return start

    def _grow(self, cap: int) -> None:
        old: list[npt.NDArray[Any]] = [*self._row_arrays(), self._live, self._class_of_row]
        n = self._end
        self._allocate(cap)
        grown_class = np.zeros(cap, dtype=np.int32)
        new: list[npt.NDArray[Any]] = [*self._row_arrays(), self._live, grown_class]
        for src, dst in zip(old, new, strict=True):
            dst[:n] = src[:n]
        self._class_of_row = grown_class

    def _append(self, cls: int) -> int:
        """A free row at the end of class ``cls``'s segment (moving it if full)."""
        seg = self._segments[cls]
        if seg.count == seg.cap:
            grow = max(_MIN_SEGMENT, seg.cap // 2)
            if seg.start + seg.cap == self._end:
                self._reserve(grow)  # last segment: grows in place
                seg.cap += grow
            else:
                start = self._reserve(seg.cap + grow)
                self._relocate(seg, start)
                seg.cap += grow
        row = seg.start + seg.count
        seg.count += 1
        self._changed.add(cls)
        self._class_of_row[row] = cls
        return row

    def _relocate(self, seg: _Segment, start: int) -> None:
        """Move ``seg``'s rows to ``[start, start + count)`` (reserved), a block at a time."""
        old, count = seg.start, seg.count
        src, dst = slice(old, old + count), slice(start, start + count)
        for arr in (*self._row_arrays(), self._class_of_row):
            arr[dst] = arr[src]
        if self.columns:
            for arr in self.columns.arrays:
                if arr.dtype == object:
                    arr[src] = None
        self._live[src] = False
        self._live[dst] = True
        moved = self._ids[src]
        self._ids[dst] = moved
        self._ids[src] = [None] * count
        for offset, chunk_id in enumerate(moved):
            if chunk_id is not None:
                self._row[chunk_id] = start + offset
        seg.start = start

    def _maybe_compact(self, written: int) -> None:
        """Lay the segments out afresh, with room to grow, once the rows a compaction
        would not keep — holes moved segments left, and room beyond what a compaction
        grants a class (classes that shrank) — pass a third of the matrix.

        Right after ``compact(room=True)`` nothing is in excess, so a compaction never
        triggers the next (however small the classes); and the check walks every
        class only once per so many rows written (a sixteenth of the classes, at
        least 64), so its cost per row stays constant with many classes; and the sum is kept
        running (:meth:`kept_rows`), so a check costs the classes changed since."""
        self._unchecked += written
        if self._end < 4096 or self._unchecked < max(64, len(self._segments) // 16):
            return
        self._unchecked = 0
        if self._end - self.kept_rows() > self._end // 3:
            self.compact(room=True)

    def kept_rows(self) -> int:
        """The rows a compaction would keep: Σ min(cap, count + room(count)) over the
        classes, recounting only the classes changed since the last call."""
        segments = self._segments
        for cls in self._changed:
            seg = segments[cls]
            kept = min(seg.cap, seg.count + _room(seg.count))
            self._kept += kept - seg.kept
            seg.kept = kept
        self._changed.clear()
        return self._kept

    def compact(self, *, room: bool = False) -> None:
        """Lay every class out contiguously, in layout order: with no free room (what
        a sidecar holds), or with ``room`` for each class to grow by a quarter (at least
        a few rows) before it must move again (between writes)."""
        segments = sorted(self._segments.values(), key=lambda s: _layout_key(s.items))
        n = len(self._row)
        order = np.concatenate(
            [np.arange(s.start, s.start + s.count, dtype=np.int64) for s in segments]
            or [np.zeros(0, dtype=np.int64)]
        )
        old: list[npt.NDArray[Any]] = self._row_arrays()
        ids = [self._ids[int(r)] for r in order]
        errors = (self._err1_max, self._err2_max)
        items_list = [s.items for s in segments]
        counts = [s.count for s in segments]
        caps = [c + _room(c) if room else c for c in counts]
        starts = np.cumsum([0, *caps[:-1]], dtype=np.int64) if caps else _NO_ROWS
        end = int(sum(caps))
        self._reset(max(end + end // 8, 16))
        runs = zip(starts.tolist(), counts, strict=True)
        dst = (
            np.concatenate([np.arange(st, st + c, dtype=np.int64) for st, c in runs])
            if room and counts
            else np.arange(n, dtype=np.int64)
        )
        new: list[npt.NDArray[Any]] = self._row_arrays()
        for src_arr, dst_arr in zip(old, new, strict=True):
            dst_arr[dst] = src_arr[order]
        laid: list[str | None] = [None] * end
        taken = 0
        for st, count in zip(starts.tolist(), counts, strict=True):
            laid[st : st + count] = ids[taken : taken + count]
            taken += count
        self._ids = laid
        self._row = {chunk_id: row for row, chunk_id in enumerate(laid) if chunk_id is not None}
        for items, st, count, cap in zip(items_list, starts.tolist(), counts, caps, strict=True):
            cls = self._new_class(items, st, count, cap)
            self._class_of_row[st : st + count] = cls
        self._live[dst] = True
        self._end = end
        self._err1_max, self._err2_max = errors

    # -- reads -------------------------------------------------------------------------

    def _conjunction(self, scope: dict[str, str]) -> set[int]:
        sets = sorted((self._postings.get(item, set()) for item in scope.items()), key=len)
        out = set(sets[0])
        for other in sets[1:]:
            if not out:
                break
            out &= other
        return out

    def classes_in_scope(
        self, scope_all: dict[str, str], scope_any: list[dict[str, str]]
    ) -> set[int] | None:
        """Classes passing the composed filter, or None when there is no filter (all).

        An empty ``scope_any`` member matches every record, as in the reference.
        """
        if not scope_all and not scope_any:
            return None
        selected = self._conjunction(scope_all) if scope_all else None
        if scope_any and all(scope_any):  # an empty member admits everything
            union: set[int] = set()
            for member in scope_any:
                union |= self._conjunction(member)
            selected = union if selected is None else selected & union
        return selected

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

    def filtered_rows(self, classes: Set[int] | None, metadata_filter: MetadataFilter) -> Rows:
        """The rows of ``classes`` (all when None) whose values pass ``metadata_filter``."""
        return self.columns.select(metadata_filter, self._rows_of(classes))

    def _rows_of(self, classes: Set[int] | None) -> Rows:
        runs, rows = self._selection(classes)
        if rows is not None:
            return rows
        if not runs:
            return _NO_ROWS
        return np.arange(runs[0][0], runs[0][1], dtype=np.int64)

    def scan_ids(
        self,
        scope_all: dict[str, str],
        scope_any: list[dict[str, str]],
        metadata_filter: MetadataFilter | None,
        after_id: str | None,
        count: int,
    ) -> list[str]:
        """The ``count`` smallest ids (code-point order) above ``after_id`` among the
        rows in scope and passing ``metadata_filter``: cost follows the in-scope rows."""
        classes = self._classes(scope_all, scope_any)
        rows = (
            self._rows_of(classes)
            if metadata_filter is None
            else self.filtered_rows(classes, metadata_filter)
        )
        ids = self._ids
        found = [str(ids[r]) for r in rows.tolist()]
        if after_id is not None:
            found = [i for i in found if i > after_id]
        found.sort()
        return found[:count]

    def _classes(
        self, scope_all: dict[str, str], scope_any: list[dict[str, str]]
    ) -> frozenset[int] | None:
        key = (tuple(scope_all.items()), tuple(tuple(m.items()) for m in scope_any))
        hit = self._filters.get(key)
        if hit is not None and hit[0] == self._classes_version:
            classes = hit[1]
        else:
            found = self.classes_in_scope(scope_all, scope_any)
            classes = None if found is None else frozenset(found)
            if len(self._filters) >= 1024:
                self._filters.clear()
            self._filters[key] = (self._classes_version, classes)
        return classes

    def _runs(self, classes: Set[int]) -> list[tuple[int, int]]:
        """The selected classes' rows as merged ``[start, stop)`` runs, in order."""
        spans = sorted(
            (seg.start, seg.start + seg.count)
            for cls in classes
            if (seg := self._segments.get(cls)) is not None and seg.count
        )
        runs: list[tuple[int, int]] = []
        for start, stop in spans:
            if runs and runs[-1][1] == start:
                runs[-1] = (runs[-1][0], stop)
            else:
                runs.append((start, stop))
        return runs

    def _selection(self, classes: Set[int] | None) -> tuple[list[tuple[int, int]], Rows | None]:
        """Runs to scan and, when there are several, the rows they cover (None: one
        run, or the whole matrix with its free rows). Kept until the layout changes:
        searches outnumber the writes."""
        key = None if classes is None else frozenset(classes)
        hit = self._selections.get(key)
        if hit is not None and hit[0] == self._version:
            return hit[1], hit[2]
        rows: Rows | None = None
        if classes is None:
            runs = [(0, self._end)] if self._end else []
            if self._end != len(self._row):
                rows = np.nonzero(self._live[: self._end])[0]
        else:
            runs = self._runs(classes)
            if len(runs) > 1:
                rows = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in runs])
        if len(self._selections) >= 1024:
            self._selections.clear()
        self._selections[key] = (self._version, runs, rows)
        return runs, rows

    def _stage1(self, query: quantized.QueryCode, classes: Set[int] | None) -> tuple[Rows, F64]:
        """Rows scanned and their stage-1 scores ``a``."""
        runs, rows = self._selection(classes)
        if not runs:
            return _NO_ROWS, _NO_SCORES
        if len(runs) == 1:
            start, stop = runs[0]
            dots = quantized.int_dots(query.codes, self._codes[start:stop])
            if rows is None:  # one run, every row live
                rows = np.arange(start, stop, dtype=np.int64)
                return rows, dots * (query.scale * self._scale[start:stop])
            # The whole matrix, free rows among the live ones.
            return rows, dots[rows] * (query.scale * self._scale[rows])
        assert rows is not None
        if len(runs) <= _MAX_RUNS:
            dots = np.concatenate(
                [quantized.int_dots(query.codes, self._codes[a:b]) for a, b in runs]
            )
        else:
            dots = quantized.int_dots(query.codes, self._codes[rows])
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
        count = scores.size
        if count > k:
            bound = quantized.bound_fine(code, fine, self._err1_max, self._err2_max, self.dim)
            kth = float(np.partition(scores, count - k)[count - k])
            keep = np.nonzero(scores >= kth - 2.0 * bound)[0]
            order = keep[np.argsort(-scores[keep])]
        else:
            order = np.argsort(-scores)
        at = (order + start if rows is None else rows[order]).tolist()
        ids = self._ids
        return [Candidate(str(ids[r]), s) for r, s in zip(at, scores[order].tolist(), strict=True)]

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
            return self._fine(code, k, runs, gathered)
        rows, scores = self._stage1(code, classes)
        return self._narrow(code, k, rows, scores)

    def nearest_rows(self, query: Vector, k: int, rows: Rows) -> list[Candidate]:
        """:meth:`nearest` over the given ``rows`` (a filtered selection)."""
        if rows.size == 0:
            return []
        code = quantized.encode_query(query)
        if rows.size <= self.fine_rows:
            return self._fine(code, k, [], rows)
        dots = quantized.int_dots(code.codes, self._codes[rows])
        return self._narrow(code, k, rows, dots * (code.scale * self._scale[rows]))

    def _narrow(
        self, code: quantized.QueryCode, k: int, rows: Rows, scores: F64
    ) -> list[Candidate]:
        """The two stages after the int8 scores ``scores`` of ``rows``: every row the
        proven bounds cannot exclude from the top ``k``, best first."""
        count = rows.size
        if count > k:
            b1 = quantized.bound1(code, self._err1_max, self.dim)
            kth = float(np.partition(scores, count - k)[count - k])
            keep = np.nonzero(scores >= kth - 2.0 * b1)[0]
            rows = rows[keep]
            count = keep.size
            if count > k:
                v = quantized.dequantize(
                    self._codes[rows], self._scale[rows], self._resid[rows], self._scale2[rows]
                )
                scores = v @ code.exact
                b2 = quantized.bound2(code, self._err2_max, self.dim)
                kth = float(np.partition(scores, count - k)[count - k])
                keep = np.nonzero(scores >= kth - 2.0 * b2)[0]
                rows, scores = rows[keep], scores[keep]
            else:
                scores = scores[keep]
        order = np.argsort(-scores)
        ids = self._ids
        return [
            Candidate(str(ids[r]), s)
            for r, s in zip(rows[order].tolist(), scores[order].tolist(), strict=True)
        ]
