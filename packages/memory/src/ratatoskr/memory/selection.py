"""Which rows of the vector index a query reads: scope classes and filtered rows.

A scoped query resolves its scope on the posting lists of classes (set algebra over
a few classes, not over rows: ``scope_all`` intersects, each ``scope_any`` member
intersects, the members unite) and reads only the segments of the selected classes
(:mod:`ratatoskr.memory.segments`) — contiguous memory, cost following the in-scope
set, and exact however selective the scope. A ``metadata_filter`` narrows those rows
on the filter columns (:mod:`ratatoskr.memory.filtered`) before any vector is read;
``scan`` takes its page of ids from the same rows. The classes of recent scopes and
the runs of recent selections are kept until the layout changes: reads outnumber
writes.
"""

from __future__ import annotations

from collections.abc import Sequence, Set

import numpy as np

from bifrost.memory.filters import MetadataFilter
from ratatoskr.memory.segments import NO_ROWS, Rows, ScopeItems, Segments

__all__ = ["Selection"]

_FilterKey = tuple[ScopeItems, tuple[ScopeItems, ...]]


class Selection(Segments):
    """:class:`~ratatoskr.memory.segments.Segments` with the reads that select rows."""

    def __init__(self, dim: int, capacity: int = 1024, *, fields: Sequence[str] = ()) -> None:
        super().__init__(dim, capacity, fields=fields)
        # The runs of recent selections at some layout version.
        self._selections: dict[
            frozenset[int] | None, tuple[int, list[tuple[int, int]], Rows | None]
        ] = {}
        # The classes of recent filters at some postings version: a search's filter
        # is resolved once per class change.
        self._filters: dict[_FilterKey, tuple[int, frozenset[int] | None]] = {}

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

    def filtered_rows(self, classes: Set[int] | None, metadata_filter: MetadataFilter) -> Rows:
        """The rows of ``classes`` (all when None) whose values pass ``metadata_filter``."""
        return self.columns.select(metadata_filter, self._rows_of(classes))

    def _rows_of(self, classes: Set[int] | None) -> Rows:
        runs, rows = self._selection(classes)
        if rows is not None:
            return rows
        if not runs:
            return NO_ROWS
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

    def ids_in_scope(self, axes: dict[str, str]) -> list[str]:
        """Every id whose scope holds all of ``axes`` (non-empty), in code-point order:
        the rows of the classes on the axes' postings, no row read (``forget``)."""
        ids = self._ids
        found = [str(ids[r]) for r in self._rows_of(self._classes(axes, [])).tolist()]
        found.sort()
        return found

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
