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
ScopeItems = tuple[tuple[str, str], ...]


def scope_items(scope: dict[str, str]) -> ScopeItems:
    """A scope as the sorted ``(axis, value)`` pairs the index keeps."""
    return tuple(sorted(scope.items()))


_NO_ROWS: Rows = np.zeros(0, dtype=np.int64)
_NO_ROWS.flags.writeable = False


def _intersect(a: Rows, b: Rows) -> Rows:
    """Rows in both sorted arrays: a binary search of the smaller one's rows in the
    larger, so the cost follows the smaller set."""
    if a.size > b.size:
        a, b = b, a
    if a.size == 0:
        return a
    pos = np.minimum(np.searchsorted(b, a), b.size - 1)
    out: Rows = a[b[pos] == a]
    return out


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
        self._scopes: list[ScopeItems] = []
        self._row: dict[str, int] = {}
        self._postings: dict[tuple[str, str], set[int]] = {}
        self._arrays: dict[tuple[str, str], Rows] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._row

    def upsert(self, chunk_id: str, unit: Vector, scope: dict[str, str]) -> None:
        """Insert or replace one chunk's vector and scope."""
        items = scope_items(scope)
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

    def load(self, ids: list[str], vectors: Vector, scopes: list[ScopeItems]) -> None:
        """Replace the whole content; ``vectors`` (raw, one row per id, float32) is taken
        over and normalised in place, block by block, to keep peak memory low;
        ``scopes`` as :func:`scope_items` gives them (rows may share one tuple)."""
        n = len(ids)
        for start in range(0, n, 8192):
            block = vectors[start : start + 8192]
            norms = np.linalg.norm(block.astype(np.float64), axis=1, keepdims=True)
            block /= norms.astype(np.float32)
        self._matrix = vectors if vectors.shape[0] > 0 else np.zeros((16, self.dim), np.float32)
        self._ids = list(ids)
        self._scopes = list(scopes)
        self._row = {chunk_id: row for row, chunk_id in enumerate(self._ids)}
        self._postings = {}
        self._arrays = {}
        for row, items in enumerate(self._scopes):
            self._post(row, items)

    def _post(self, row: int, items: Iterable[tuple[str, str]]) -> None:
        for item in items:
            self._postings.setdefault(item, set()).add(row)
            self._arrays.pop(item, None)

    def _unpost(self, row: int, items: Iterable[tuple[str, str]]) -> None:
        for item in items:
            rows = self._postings.get(item)
            if rows is not None:
                rows.discard(row)
                self._arrays.pop(item, None)
                if not rows:
                    del self._postings[item]

    def _posting(self, item: tuple[str, str]) -> Rows:
        """The rows of one ``(axis, value)``, sorted, as a read-only array kept until
        the posting next changes (searches outnumber the writes that touch a scope)."""
        arr = self._arrays.get(item)
        if arr is None:
            rows = self._postings.get(item)
            if rows is None:
                return _NO_ROWS
            arr = np.fromiter(rows, dtype=np.int64, count=len(rows))
            arr.sort()
            arr.flags.writeable = False
            self._arrays[item] = arr
        return arr

    def _conjunction(self, scope: dict[str, str]) -> Rows:
        arrays = sorted((self._posting(item) for item in scope.items()), key=len)
        out = arrays[0]
        for other in arrays[1:]:
            if out.size == 0:
                break
            out = _intersect(out, other)
        return out

    def rows_in_scope(
        self, scope_all: dict[str, str], scope_any: list[dict[str, str]]
    ) -> Rows | None:
        """Rows passing the composed filter (sorted, read-only), or None when there is
        no filter (all rows).

        An empty ``scope_any`` member matches every record, as in the reference.
        """
        if not scope_all and not scope_any:
            return None
        selected: Rows | None = self._conjunction(scope_all) if scope_all else None
        if scope_any and all(scope_any):  # an empty member admits everything
            members = [self._conjunction(member) for member in scope_any]
            union = members[0] if len(members) == 1 else np.unique(np.concatenate(members))
            selected = union if selected is None else _intersect(selected, union)
        return selected

    def nearest(self, query: Vector, k: int, rows: Rows | None, margin: float) -> list[Candidate]:
        """The ``k`` best rows by float32 cosine, plus every row within ``margin`` of
        the k-th score (so a caller can re-rank near-ties exactly); best first."""
        n = len(self._ids)
        if rows is not None and rows.size == 0:
            return []
        if rows is None:
            scores = self._matrix[:n] @ query
        else:
            # Not BLAS: OpenBLAS splits any product past ~10k elements over its threads,
            # and on a busy machine waiting for the second thread cost a 3000-row scope
            # 3-8 ms against 1.5 ms single-threaded (einsum's own loop).
            scores = np.einsum("ij,j->i", self._matrix[rows], query)
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
