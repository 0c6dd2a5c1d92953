"""The rows of the in-process vector index, grouped by scope class.

Every open store's :class:`~ratatoskr.memory.index.VectorIndex` keeps its per-row
arrays (int8 codes and scales, :mod:`ratatoskr.memory.filtered`'s columns) and
posting lists from each scope ``(axis, value)`` to the **scope classes** holding it
(a class: all chunks with one exact scope). Each class owns one contiguous
**segment** of rows, and classes are laid out ordered by tenant, group, agent and
end user, so one tenant's classes sit side by side after a load or a compaction.

A class that outgrows its segment moves to the end of the matrix with room to
grow (or grows in place when it is already last); a delete moves the segment's
last row into the hole. The space left behind is reclaimed by a compaction once
it passes a third of the matrix. :class:`Segments` is that layout and nothing
else: which rows a query reads is :mod:`ratatoskr.memory.selection`, how they are
scored :mod:`ratatoskr.memory.index`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ratatoskr.memory.filtered import FilterColumns
from ratatoskr.memory.quantized import Codes

__all__ = ["NO_ROWS", "Rows", "ScopeItems", "Segments", "scope_items"]

Rows = npt.NDArray[np.int64]
ScopeItems = tuple[tuple[str, str], ...]

# The order classes are laid out in: one tenant's classes end up adjacent.
_LAYOUT_AXES = ("tenant", "group", "agent_self", "end_user")
_MIN_SEGMENT = 4
NO_ROWS: Rows = np.zeros(0, dtype=np.int64)


def _room(count: int) -> int:
    """The free rows a compaction between writes leaves a class of ``count`` rows."""
    return max(_MIN_SEGMENT, count // 4)


def scope_items(scope: dict[str, str]) -> ScopeItems:
    """A scope as the sorted ``(axis, value)`` pairs the index keeps."""
    return tuple(sorted(scope.items()))


def _layout_key(items: ScopeItems) -> tuple[tuple[str, ...], ScopeItems]:
    values = dict(items)
    return tuple(values.get(axis, "") for axis in _LAYOUT_AXES), items


class _Segment:
    """The rows ``[start, start + count)`` of one scope class, room up to ``cap``;
    ``kept`` is what it added to the index's running count of kept rows when last
    counted (see ``VectorIndex.kept_rows``)."""

    __slots__ = ("cap", "count", "items", "kept", "start")

    def __init__(self, items: ScopeItems, start: int, count: int, cap: int) -> None:
        self.items, self.start, self.count, self.cap = items, start, count, cap
        self.kept = 0


class Segments:
    """Per-row arrays and scope postings of the live chunks, rows grouped in one
    segment per scope class (not thread-safe by itself)."""

    def __init__(self, dim: int, capacity: int = 1024, *, fields: Sequence[str] = ()) -> None:
        self.dim = dim
        # The declared filterable fields' values, row-aligned (moved with the codes).
        self.columns = FilterColumns(fields)
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
        # Layout version (rows moved) and version of the postings (classes made or
        # dropped): what :mod:`ratatoskr.memory.selection` keeps is valid at one of them.
        self._version = 0
        self._classes_version = 0

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
        starts = np.cumsum([0, *caps[:-1]], dtype=np.int64) if caps else NO_ROWS
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
