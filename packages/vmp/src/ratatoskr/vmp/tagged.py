"""Which records have metadata, held in memory so a search need not ask the file.

A search answers a hit without metadata with no SQL of its own. The flags stand for
one state of the file: one ``epoch`` (restores change it), the first ``count``
records (appended only within an epoch) and one ``version`` — the file's
``metadata_changes`` counter, which a trigger bumps with every metadata update of a
record, whoever writes it. Flags whose (epoch, version) equal the file's, and that
cover its record count, are the file's. Published flags are never changed (an update
replaces them; appends write past the published count), so a search sees one state.
A ``bytearray``, one byte a record: indexing it costs a fraction of a numpy array's.
"""

from __future__ import annotations

import threading

# A reload of every flag after another process's metadata updates reads the records
# that have metadata; spread over this many records per search (see may_reload).
RELOAD_ROWS_PER_SEARCH = 2048


class MetadataFlags:
    """``flags[record_id]``: whether that record has metadata, for one state of the file."""

    def __init__(self, *, rows_per_search: int = RELOAD_ROWS_PER_SEARCH) -> None:
        self._lock = threading.Lock()
        self._state: tuple[int, int] | None = None  # (epoch, version)
        self._count = 0
        self._flags = bytearray()
        self._rows_per_search = rows_per_search
        self._reload_wait = 0  # searches to answer without flags before the next reload

    def may_reload(self, count: int) -> bool:
        """Whether a search may reload every flag of ``count`` records now. A reload
        reads every record that has metadata: after one, the next ``count //
        rows_per_search`` asks are refused (those searches take the general route,
        which reads its hits' metadata), so while another process keeps updating
        metadata a reload adds at most about ``rows_per_search`` rows to a search."""
        with self._lock:
            if self._reload_wait > 0:
                self._reload_wait -= 1
                return False
            self._reload_wait = count // self._rows_per_search
            return True

    def step(self, epoch: int, version: int, record_id: int, tagged: bool) -> None:
        """The file's one metadata update from ``version - 1`` to ``version`` was of
        ``record_id`` (another process's): applied when the flags stand at ``version -
        1``; a record past the flags' count is left to the append that reads it."""
        with self._lock:
            if self._state != (epoch, version - 1):
                return
            flags = self._flags
            if record_id < self._count:
                flags = bytearray(flags)
                flags[record_id] = tagged
            self._state, self._flags = (epoch, version), flags

    def current(self, epoch: int, version: int, count: int) -> bytearray | None:
        """Flags whose bytes ``0 … count-1`` (1: the record has metadata) are the file's
        at (epoch, version) with ``count`` records; None otherwise. Read no byte past
        ``count``: appends write there."""
        with self._lock:
            if self._state != (epoch, version) or self._count != count:
                return None
            return self._flags

    def covers(self, epoch: int, version: int) -> int | None:
        """How many records the flags hold for (epoch, version); None for another state."""
        with self._lock:
            return self._count if self._state == (epoch, version) else None

    def load(self, epoch: int, version: int, count: int, tagged: list[int]) -> None:
        """Every flag anew: records ``tagged`` (all below ``count``) have metadata."""
        flags = bytearray(count)
        for record_id in tagged:
            flags[record_id] = 1
        with self._lock:
            self._state, self._count, self._flags = (epoch, version), count, flags

    def extend(self, epoch: int, version: int, start: int, tagged: list[bool]) -> None:
        """Records ``start …`` of the same state, read from the file; ignored unless the
        flags end exactly at ``start``."""
        with self._lock:
            if self._state == (epoch, version) and self._count == start:
                self._append(tagged)

    def inserted(self, epoch: int, version: int, record_id: int, tagged: bool) -> None:
        """This process committed record ``record_id`` (metadata or not) at (epoch, version)."""
        with self._lock:
            if self._state == (epoch, version) and self._count == record_id:
                self._append([tagged])

    def updated(self, epoch: int, before: int, record_id: int, tagged: bool) -> None:
        """This process committed a metadata update of ``record_id`` that moved the
        counter from ``before`` to ``before + 1``. Applied when the flags stand at
        ``before``; kept when they already stand at ``before + 1`` (read from the file
        after the commit); forgotten otherwise (a later search reloads them)."""
        with self._lock:
            if self._state == (epoch, before + 1):
                return
            if self._state != (epoch, before) or record_id >= self._count:
                self._state = None
                return
            flags = bytearray(self._flags)
            flags[record_id] = tagged
            self._state, self._flags = (epoch, before + 1), flags

    def forget(self) -> None:
        with self._lock:
            self._state = None

    def _append(self, tagged: list[bool]) -> None:
        self._flags.extend(tagged)
        self._count += len(tagged)
