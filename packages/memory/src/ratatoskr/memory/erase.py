"""Erasing chunks from a SQLite memory store: ``delete_many``, ``forget`` and retention.

Every route removes a chunk the same way (:func:`remove_rows`): its row, its vec0
row (sqlite-vec 0.1.9 zeroes the deleted vector's slot in its chunk blob,
measured), and a tombstone that holds a keyed digest of its id, not the id
(:mod:`ratatoskr.memory.changes`); ``secure_delete`` zeroes what the deletes
free. The erasure is then flushed (:mod:`ratatoskr.sqlite.erasure`): the index
sidecar written again from the index without the erased rows, and a truncating
checkpoint, in the background ~1 s after a delete, at once when ``forget``
returns.

``delete_many`` (:func:`delete`) decides the caller's grant in its one
transaction: the stored scopes of its ids are read under ``BEGIN IMMEDIATE`` and
bifrost's :func:`~bifrost.writes.deletable` keeps those inside the grant, so a
chunk another tenant writes at the same moment is never erased by it.

``forget`` finds the chunks on the in-process index's scope classes (the index
knows every row's scope: no row is read to find them, see
:meth:`~ratatoskr.memory.selection.Selection.ids_in_scope`), then erases them in
bounded transactions of :data:`FORGET_BATCH` chunks, each re-checking the scope of
the rows it erases inside its own transaction, so a chunk rewritten into another
scope meanwhile stays, and other tenants' writes and index catch-ups never wait for
more than one batch. Its batches leave the flush to its end (one sidecar rewrite
and one truncating checkpoint for the whole forget, not one per second of it).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import apsw

from bifrost.writes import deletable
from ratatoskr.memory import changes
from ratatoskr.sqlite import erasure

if TYPE_CHECKING:
    from ratatoskr.memory.index import VectorIndex
    from ratatoskr.memory.store import SqliteMemoryStore

# Chunks one forget transaction erases (measured: ~25 ms each at 384 dims).
FORGET_BATCH = 500
# Pause between two batches of one forget (a yield: other threads take the GIL and
# the write lock).
FORGET_PAUSE_S = 0.0
# Pages of the page cache an erasing transaction keeps room for: each chunk's
# freed leaf (zeroed: dirty until the commit) and its index and vec0 pages, beside a
# vec0 vector chunk's overflow chain (see ratatoskr.sqlite.erasure.make_room).
_ROOM_BASE_PAGES = 1024
_ROOM_PAGES_PER_CHUNK = 4
# Rounds a forget makes over what matched: chunks written into the scope while it
# ran are erased by the next round; past this many it stops (and says how many).
_FORGET_ROUNDS = 5


def remove_rows(conn: apsw.Connection, ids: Sequence[str], seq: int) -> None:
    """Delete the chunks ``ids`` (present ones), their vectors, and leave tombstones
    stamped ``seq``; inside the caller's write transaction."""
    rows = [(chunk_id,) for chunk_id in ids]
    erasure.make_room(conn, _ROOM_BASE_PAGES + _ROOM_PAGES_PER_CHUNK * len(rows))
    conn.executemany("DELETE FROM memory_chunks WHERE chunk_id = ?", rows)
    conn.executemany("DELETE FROM memory_vec WHERE chunk_id = ?", rows)
    changes.bury(conn, ids, seq)


def contains(scope: Mapping[str, str], axes: Mapping[str, str]) -> bool:
    """Whether ``scope`` holds every axis of ``axes`` with its value."""
    return all(scope.get(axis) == value for axis, value in axes.items())


def matching(store: SqliteMemoryStore, axes: Mapping[str, str]) -> list[str]:
    """Ids of the chunks whose scope contains ``axes``, in id order, from the in-process
    index caught up to a snapshot of the database (or newer: the index may be past it),
    so chunks another process wrote into the scope are found too."""

    def read(index: VectorIndex) -> list[str]:
        return index.ids_in_scope(dict(axes))

    with store.database.read() as conn:
        _current, ids = store._sync.read_at(conn, changes.seq(conn), read)
    if ids is not None:
        return ids
    return store._sync.read_now(read)[1]  # the index is past that snapshot: newer still


def _still_matching(
    store: SqliteMemoryStore, conn: apsw.Connection, ids: Sequence[str], axes: Mapping[str, str]
) -> list[str]:
    _revisions, scopes = store._heads(conn, ids)
    return [chunk_id for chunk_id in ids if contains(scopes.get(chunk_id, {}), axes)]


def erase_chosen(
    store: SqliteMemoryStore,
    choose: Callable[[apsw.Connection], Sequence[str]],
    *,
    mark: bool = True,
) -> list[str]:
    """One write transaction erasing the chunks ``choose(conn)`` picks inside it, then
    the in-process index mirrored and (``mark``) the erasure marked for flushing; a
    caller passing ``mark=False`` flushes it itself. Returns the ids erased."""
    with store.database.write() as conn:
        ids = list(choose(conn))
        seq_before = changes.seq(conn)
        seq = seq_before + 1
        if ids:
            remove_rows(conn, ids, seq)
            changes.set_seq(conn, seq)
            store._prune_tombstones(conn, seq, added=len(ids))
    if ids:
        store._sync.apply(seq_before, seq, deletes=ids)
        if mark:
            store.database.erasure.erased()
    return ids


def delete(store: SqliteMemoryStore, ids: Sequence[str], grant: Mapping[str, str]) -> int:
    """``delete_many``: one write transaction erasing the chunks of the distinct ``ids``
    that exist and lie inside ``grant`` (:func:`~bifrost.writes.deletable` on the
    scopes read in it), expired ones too; how many of those were live."""
    live: list[int] = []

    def choose(conn: apsw.Connection) -> list[str]:
        _revisions, scopes = store._heads(conn, ids)
        chosen = deletable(ids, scopes, grant)
        live.append(len(chosen) - len(store.retention.expired(conn, chosen)))
        return chosen

    erase_chosen(store, choose)
    return live[0]


def attach(store: SqliteMemoryStore) -> None:
    """Make the store's erasure flush write its index sidecar again first."""

    def rewrite() -> None:
        with store.database.read() as conn:
            store._sync.rewrite(conn)

    store.database.erasure.before = rewrite


def forget(
    store: SqliteMemoryStore,
    axes: Mapping[str, str],
    *,
    dry_run: bool = False,
    batch: int = FORGET_BATCH,
    pause_s: float = FORGET_PAUSE_S,
) -> int:
    """Erase every chunk whose scope contains ``axes`` (expired ones included), in
    transactions of ``batch`` chunks, then flush the erasure (sidecar rewritten, WAL
    checkpointed and truncated, waiting for readers up to the busy timeout). Returns
    how many were erased (``dry_run``: how many match, nothing written).

    Raises StorageError subclasses; a batch that failed leaves the earlier ones
    erased (run it again: it is idempotent). Raises ValueError for empty ``axes``
    (which would be every chunk)."""
    if not axes:
        raise ValueError("forget needs at least one scope axis")
    total = 0
    try:
        for _round in range(_FORGET_ROUNDS):
            ids = matching(store, axes)
            if dry_run:
                return len(ids)
            if not ids:
                break
            for part in _batches(ids, batch):
                check = functools.partial(_still_matching, store, ids=part, axes=axes)
                total += len(erase_chosen(store, check, mark=False))
                # Let other tenants' searches and writes in between two batches.
                time.sleep(pause_s)
    except BaseException:
        if total:  # what committed is flushed in the background when a batch failed
            store.database.erasure.erased()
        raise
    store.database.erasure.flush()
    return total


def _batches(ids: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for start in range(0, len(ids), size):
        yield ids[start : start + size]
