"""Pages of the index's memory-mapped arrays given back once a search has read them.

A reopened index maps its int8 codes and residual codes from the sidecar
(:mod:`ratatoskr.memory.sidecar`, copy-on-write). Every page a search reads stays
mapped, and the kernel maps file pages in blocks around each fault (here about
2 MB per search of 100 rows: page-cache folios and fault-around), so a few hundred scattered
stage-2 rows map the whole residual array. At 1M chunks × 384 dims that was 768 MB
of a serving process's peak RSS for arrays a search reads a sliver of.

For an array mapped from a file and larger than a budget, a :class:`Released` array
counts the bytes of the rows searches read, and once they pass the budget hands
the whole map back to the kernel (``MADV_DONTNEED``); a whole-matrix scan reads
a budget's worth of rows at a time (``VectorIndex._run_dots``). The next read maps
the pages again from the page cache (or the file), bit for bit the same, because
nothing ever wrote them. That is the condition:
**only while the index has not written since it adopted the map**. A private page a
write made (copy-on-write) would be *discarded* by ``MADV_DONTNEED`` and read back
from the file, with the old codes; so the owner passes its layout version and
releases nothing once it has moved on (:meth:`Released.still_clean`). Concurrent
searches may release pages another search is reading: it faults them in again,
with the same content.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["BUDGET", "Released"]

# Mapped arrays up to this size stay mapped whole: re-faulting costs more than the
# memory (100k chunks × 384 dims: 38 MB each, never released).
BUDGET = 64 << 20
# What the kernel maps around one read, at least (folios and fault-around: about 2 MB
# per search of 100 rows here): each read counts for this much more than its rows.
GRANULE = 2 << 20


def _map_of(arr: npt.NDArray[Any]) -> mmap.mmap | None:
    """The mmap a contiguous array views (None when it views none, or lies outside
    it)."""
    if not arr.flags.c_contiguous:
        return None
    base: Any = arr
    while base is not None:
        found = getattr(base, "_mmap", None)
        if isinstance(found, mmap.mmap):
            start = int(np.frombuffer(found, dtype=np.uint8, count=1).ctypes.data)
            offset = int(arr.ctypes.data) - start
            return found if offset >= 0 and offset + arr.nbytes <= len(found) else None
        base = getattr(base, "base", None)
    return None


class Released:
    """A row-major array mapped from a file whose pages are given back after reads:
    the rows searches read are counted, and once they pass the budget the whole map
    is given back (so pages a stream of small searches shares stay mapped, and the
    mapped part stays within about the budget plus one search's rows)."""

    __slots__ = ("_budget", "_map", "_pending", "_row_bytes", "version")

    def __init__(self, mapped: mmap.mmap, row_bytes: int, version: int, budget: int) -> None:
        self._map, self._row_bytes, self._budget = mapped, row_bytes, budget
        self._pending = 0
        self.version = version

    @classmethod
    def of(cls, arr: npt.NDArray[Any], version: int, budget: int = BUDGET) -> Released | None:
        """A :class:`Released` for ``arr`` when it is mapped from a file and larger than
        ``budget`` bytes; else None (nothing to give back)."""
        if arr.ndim == 0 or arr.shape[0] == 0 or arr.nbytes <= budget:
            return None
        if not hasattr(mmap, "MADV_DONTNEED"):  # not Linux or BSD: keep the pages
            return None
        found = _map_of(arr)
        if found is None:
            return None
        return cls(found, arr.nbytes // arr.shape[0], version, budget)

    def still_clean(self, version: int) -> bool:
        """Whether the owner has not written since the map was adopted (``version`` is
        its layout version now)."""
        return version == self.version

    def read(self, start: int, stop: int) -> None:
        """Count rows ``[start, stop)`` as read (and the granule the kernel maps around
        them); past the budget, give every page back."""
        self._pending += max(0, stop - start) * self._row_bytes + GRANULE
        if self._pending >= self._budget:
            self._pending = 0
            self._map.madvise(mmap.MADV_DONTNEED)
