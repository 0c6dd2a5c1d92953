"""Retention on the SQLite memory store, and the sweep every memory backend runs.

A chunk is expired once its last successful write (``memory_chunks.updated_at``,
the write's clock read inside its transaction) is older than ``retention_s``
(:mod:`bifrost.memory.retention` decides). From that instant:

- **reads** drop it, inside the snapshot that reads it (:meth:`Retention.drop`):
  get, get_many, scopes_of (so a grant sees it absent), search and scan. One probe
  of the ``updated_at`` index (:data:`ANY_EXPIRED_SQL`) tells whether anything is
  expired at all; only then are the read's ids checked (:data:`EXPIRED_AMONG_SQL`).
  Search and scan stay exact: a search whose candidates held expired chunks asks
  the index for more (:func:`widened_top_k`), a scan page that lost some reads on
  after its last id (:func:`scan_live`);
- **delete_many** erases it without counting it (:func:`ratatoskr.memory.erase.delete`);
- **an upsert** of its id erases the expired row inside the write's transaction
  and writes a new chunk at revision 1 (:meth:`Retention.drop_heads`);
- **the sweep** (:class:`Sweeper`, a daemon thread of a serving store) erases
  expired chunks oldest first in transactions of :data:`SWEEP_BATCH`, through
  :func:`ratatoskr.memory.erase.erase_chosen` (tombstones without ids, the
  erasure flushed by a truncating checkpoint), every :data:`SWEEP_INTERVAL_S`.
  Bytes of a chunk expired at ``t`` are gone from the files by about
  ``t + SWEEP_INTERVAL_S + FLUSH_DELAY_S`` (docs/privacy.md).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import apsw

from bifrost.memory.retention import expiry_cutoff
from bifrost.memory.validation import ScanQuery
from ratatoskr.memory import erase

if TYPE_CHECKING:
    from ratatoskr.memory.store import SqliteMemoryStore

__all__ = [
    "EXPIRED_SQL",
    "UPDATED_AT_INDEX_SQL",
    "Retention",
    "Sweeper",
    "scan_live",
    "sweep",
    "widened_top_k",
]

# Seconds between two sweeps of a serving store, and the chunks one sweep
# transaction erases (other writers wait for one batch at most).
SWEEP_INTERVAL_S = 30.0
SWEEP_BATCH = 500
# Pause between two batches of one sweep (lets other writers in).
SWEEP_PAUSE_S = 0.01

# Migration 6: the expiry probe and the sweep read ``updated_at`` in order.
UPDATED_AT_INDEX_SQL = (
    "CREATE INDEX IF NOT EXISTS memory_chunks_updated_at ON memory_chunks(updated_at);"
)
# The predicate of an expired row (one parameter: the cutoff), for every read path.
EXPIRED_SQL = "updated_at < ?"
ANY_EXPIRED_SQL = f"SELECT 1 FROM memory_chunks WHERE {EXPIRED_SQL} LIMIT 1"
_SQL_CHUNK = 500
_log = logging.getLogger(__name__)


def _expired_among_sql(n: int) -> str:
    return (
        f"SELECT chunk_id FROM memory_chunks WHERE {EXPIRED_SQL}"
        f" AND chunk_id IN ({','.join('?' * n)})"
    )


def expired_among(conn: apsw.Connection, ids: Iterable[str], cutoff: float) -> set[str]:
    """The ids among ``ids`` whose rows are expired under ``cutoff`` (one indexed probe
    first: nothing is read per id when nothing is expired)."""
    if not conn.execute(ANY_EXPIRED_SQL, (cutoff,)).fetchall():
        return set()
    wanted = list(ids)
    out: set[str] = set()
    for start in range(0, len(wanted), _SQL_CHUNK):
        part = wanted[start : start + _SQL_CHUNK]
        out.update(str(r[0]) for r in conn.execute(_expired_among_sql(len(part)), (cutoff, *part)))
    return out


@dataclasses.dataclass(frozen=True)
class Retention:
    """A store's retention: ``retention_s`` (None: forever) and its clock."""

    retention_s: float | None
    clock: Callable[[], float]

    @property
    def enabled(self) -> bool:
        return self.retention_s is not None

    def cutoff(self, now: float | None = None) -> float | None:
        return expiry_cutoff(self.clock() if now is None else now, self.retention_s)

    def expired(self, conn: apsw.Connection, ids: Iterable[str]) -> set[str]:
        """The expired ids among ``ids`` in ``conn``'s snapshot (empty when disabled)."""
        cutoff = self.cutoff()
        return set() if cutoff is None else expired_among(conn, ids, cutoff)

    def drop(self, conn: apsw.Connection, found: dict[str, Any]) -> set[str]:
        """Remove the expired ids from ``found`` (in place); returns them."""
        gone = self.expired(conn, list(found)) if found else set()
        for chunk_id in gone:
            del found[chunk_id]
        return gone

    def drop_heads(
        self,
        conn: apsw.Connection,
        now: float,
        revisions: dict[str, int],
        scopes: dict[str, dict[str, str]],
    ) -> list[str]:
        """A write's heads without the expired chunks (in place: they are absent to
        its grant and revision checks); returns their ids, for the write to erase."""
        cutoff = self.cutoff(now)
        if cutoff is None or not revisions:
            return []
        gone = sorted(expired_among(conn, list(revisions), cutoff))
        for chunk_id in gone:
            del revisions[chunk_id]
            scopes.pop(chunk_id, None)
        return gone


def widened_top_k(top_k: int, asked: int, found: int, gone: int) -> int | None:
    """The ``top_k`` to ask the index for next, or None when the candidates of a search
    for ``asked`` (``found`` of them, ``gone`` expired) already hold the exact
    ``top_k`` live ones: fewer than asked means every in-scope chunk came back, and
    the best ``asked`` in scope hold at least ``asked - gone`` live ones."""
    if gone == 0 or found < asked or asked - gone >= top_k:
        return None
    return top_k + gone


def scan_live(
    query: ScanQuery,
    page: Callable[
        [ScanQuery, Callable[[apsw.Connection, Sequence[str]], set[str]]],
        list[tuple[str, dict[str, Any]]],
    ],
    retention: Retention,
) -> list[tuple[str, dict[str, Any]]]:
    """``page(query, drop)`` (the store's scan, ``drop`` applied in its snapshot) until
    ``query.limit + 1`` live rows or the end: a page that lost expired rows reads on
    after its last id (each part one snapshot; keyset order keeps the walk exact)."""
    if not retention.enabled:
        return page(query, lambda _conn, _ids: set())
    out: list[tuple[str, dict[str, Any]]] = []
    after = query.after_id
    while True:
        want = query.limit + 1 - len(out)
        seen: list[Sequence[str]] = []
        rows = page(
            dataclasses.replace(query, after_id=after, limit=want - 1),
            functools.partial(_drop_seen, retention, seen),
        )
        out += rows
        raw = seen[-1] if seen else ()
        if len(rows) >= want or len(raw) < want:
            return out[: query.limit + 1]
        after = max(raw)


def _drop_seen(
    retention: Retention, seen: list[Sequence[str]], conn: apsw.Connection, ids: Sequence[str]
) -> set[str]:
    seen.append(ids)  # the last call is the snapshot the page used
    return retention.expired(conn, ids)


def sweep(store: SqliteMemoryStore, *, limit: int | None = None, batch: int = SWEEP_BATCH) -> int:
    """Erase expired chunks, oldest first, ``batch`` per transaction (the cutoff read
    inside each), until none is left or ``limit`` are erased; how many."""
    total = 0
    while limit is None or total < limit:
        size = batch if limit is None else min(batch, limit - total)

        def choose(conn: apsw.Connection, size: int = size) -> list[str]:
            cutoff = store.retention.cutoff()
            if cutoff is None:
                return []
            return [
                str(r[0])
                for r in conn.execute(
                    f"SELECT chunk_id FROM memory_chunks WHERE {EXPIRED_SQL}"
                    " ORDER BY updated_at LIMIT ?",
                    (cutoff, size),
                )
            ]

        n = len(erase.erase_chosen(store, choose))
        total += n
        if n < size:
            break
        time.sleep(SWEEP_PAUSE_S)
    return total


class Sweeper:
    """A daemon thread calling ``sweep()`` every ``interval_s`` until :meth:`stop`.
    A failed sweep (the database busy or gone) is tried again at the next interval."""

    def __init__(self, sweep: Callable[[], int], interval_s: float = SWEEP_INTERVAL_S) -> None:
        self._sweep = sweep
        self._interval_s = interval_s
        self._stop = threading.Event()
        self.swept = 0  # chunks erased so far (for operators and tests)
        self._thread = threading.Thread(target=self._run, name="ratatoskr-retention", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.swept += self._sweep()
            except Exception as exc:  # a busy or closing database: the next interval
                _log.warning("retention sweep failed (%s); retried", type(exc).__name__)

    def stop(self) -> None:
        """Stop the thread, waiting for a sweep in progress; idempotent."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
