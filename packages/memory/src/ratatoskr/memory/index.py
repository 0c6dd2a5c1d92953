"""The in-process vector index that answers searches exactly.

sqlite-vec is the durable index (its rows are one-to-one with the chunks), but
the x86_64 wheel is built without AVX and scans 3–7× slower than numpy, and its
metadata filters cannot express a ``scope_any`` union exactly. So every open
store keeps, beside the database, a dense float32 matrix of unit vectors plus
posting lists from each scope ``(axis, value)`` to its rows:

- an unscoped search is one matrix-vector product over the live rows;
- a scoped search first resolves the filter on the posting lists (set algebra:
  ``scope_all`` intersects, each ``scope_any`` member intersects, the members
  unite) and then scores only the in-scope rows — cost follows the in-scope set,
  not the store size, and the result is exact however selective the scope.

Deletes move the last row into the hole, so the live rows stay a prefix of the
matrix. The index knows nothing of SQLite; ``store.py`` keeps it in step with
the database (``seq`` is the change counter it was built to).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]
Rows = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Candidate:
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
    """:func:`unit_float64` rounded to float32 (what the matrix and vec0 hold)."""
    out: Vector = unit_float64(values).astype(np.float32)
    return out


class VectorIndex:
    """Unit vectors and scope postings of the live chunks (not thread-safe by itself)."""

    def __init__(self, dim: int, capacity: int = 1024) -> None:
        self.dim = dim
        self.seq = 0
        self._matrix: Vector = np.zeros((max(capacity, 16), dim), dtype=np.float32)
        self._ids: list[str] = []
        self._scopes: list[tuple[tuple[str, str], ...]] = []
        self._row: dict[str, int] = {}
        self._postings: dict[tuple[str, str], set[int]] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._row

    def upsert(self, chunk_id: str, unit: Vector, scope: dict[str, str]) -> None:
        """Insert or replace one chunk's vector and scope."""
        items = tuple(sorted(scope.items()))
        row = self._row.get(chunk_id)
        if row is None:
            row = len(self._ids)
            if row == self._matrix.shape[0]:
                # Grow by a quarter: doubling a 100k × 384 matrix would briefly need 450 MB.
                grown = np.zeros((row + row // 4 + 1024, self.dim), dtype=np.float32)
                grown[:row] = self._matrix
                self._matrix = grown
            self._ids.append(chunk_id)
            self._scopes.append(items)
            self._row[chunk_id] = row
        else:
            self._unpost(row, self._scopes[row])
            self._scopes[row] = items
        self._matrix[row] = unit
        self._post(row, items)

    def remove(self, chunk_id: str) -> None:
        """Drop one chunk (absent ids are ignored)."""
        row = self._row.pop(chunk_id, None)
        if row is None:
            return
        self._unpost(row, self._scopes[row])
        last = len(self._ids) - 1
        if row != last:
            moved_id, moved_scope = self._ids[last], self._scopes[last]
            self._unpost(last, moved_scope)
            self._matrix[row] = self._matrix[last]
            self._ids[row], self._scopes[row] = moved_id, moved_scope
            self._row[moved_id] = row
            self._post(row, moved_scope)
        self._ids.pop()
        self._scopes.pop()

    def load(self, ids: list[str], vectors: Vector, scopes: list[dict[str, str]]) -> None:
        """Replace the whole content; ``vectors`` (raw, one row per id, float32) is taken
        over and normalised in place, block by block, to keep peak memory low."""
        n = len(ids)
        for start in range(0, n, 8192):
            block = vectors[start : start + 8192]
            norms = np.linalg.norm(block.astype(np.float64), axis=1, keepdims=True)
            block /= norms.astype(np.float32)
        self._matrix = vectors if vectors.shape[0] > 0 else np.zeros((16, self.dim), np.float32)
        self._ids = list(ids)
        self._scopes = [tuple(sorted(s.items())) for s in scopes]
        self._row = {chunk_id: row for row, chunk_id in enumerate(self._ids)}
        self._postings = {}
        for row, items in enumerate(self._scopes):
            self._post(row, items)

    def _post(self, row: int, items: Iterable[tuple[str, str]]) -> None:
        for item in items:
            self._postings.setdefault(item, set()).add(row)

    def _unpost(self, row: int, items: Iterable[tuple[str, str]]) -> None:
        for item in items:
            rows = self._postings.get(item)
            if rows is not None:
                rows.discard(row)
                if not rows:
                    del self._postings[item]

    def _conjunction(self, scope: dict[str, str]) -> set[int]:
        sets = [self._postings.get(item) for item in scope.items()]
        if any(s is None for s in sets):
            return set()
        ordered = sorted((s for s in sets if s is not None), key=len)
        return set(ordered[0]).intersection(*ordered[1:])

    def rows_in_scope(
        self, scope_all: dict[str, str], scope_any: list[dict[str, str]]
    ) -> Rows | None:
        """Rows passing the composed filter, or None when there is no filter (all rows).

        An empty ``scope_any`` member matches every record, as in the reference.
        """
        if not scope_all and not scope_any:
            return None
        selected: set[int] | None = self._conjunction(scope_all) if scope_all else None
        if scope_any:
            if any(not member for member in scope_any):
                union: set[int] | None = None  # an empty member admits everything
            else:
                union = set()
                for member in scope_any:
                    union |= self._conjunction(member)
            if union is not None:
                selected = union if selected is None else selected & union
        if selected is None:
            return None
        return np.fromiter(selected, dtype=np.int64, count=len(selected))

    def nearest(self, query: Vector, k: int, rows: Rows | None, margin: float) -> list[Candidate]:
        """The ``k`` best rows by float32 cosine, plus every row within ``margin`` of
        the k-th score (so a caller can re-rank near-ties exactly); best first."""
        n = len(self._ids)
        if rows is not None and rows.size == 0:
            return []
        scores = self._matrix[:n] @ query if rows is None else self._matrix[rows] @ query
        count = int(scores.shape[0])
        if count == 0:
            return []
        if count > k:
            top = np.argpartition(-scores, k - 1)[:k]
            floor = float(scores[top].min()) - margin
            picked = np.nonzero(scores >= floor)[0]
        else:
            picked = np.arange(count)
        picked = picked[np.argsort(-scores[picked], kind="stable")]
        positions = picked if rows is None else rows[picked]
        return [
            Candidate(self._ids[int(p)], float(scores[int(q)]))
            for p, q in zip(positions, picked, strict=True)
        ]
