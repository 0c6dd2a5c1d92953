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

``forget`` works in bounded transactions of :data:`FORGET_BATCH` chunks, each
re-checking the scope of the rows it erases inside its own transaction, so a
chunk rewritten into another scope meanwhile stays, and other tenants' writes and
index catch-ups never wait for more than one batch.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import apsw

from bifrost.writes import deletable
from ratatoskr.memory import changes
from ratatoskr.sqlite import codec

if TYPE_CHECKING:
    from ratatoskr.memory.store import SqliteMemoryStore

# Chunks one forget transaction erases (measured: ~25 ms each at 384 dims).
FORGET_BATCH = 500
# Rounds a forget makes over what matched: chunks written into the scope while it
# ran are erased by the next round; past this many it stops (and says how many).
_FORGET_ROUNDS = 5
_SQL_CHUNK = 500


def remove_rows(conn: apsw.Connection, ids: Sequence[str], seq: int) -> None:
    """Delete the chunks ``ids`` (present ones), their vectors, and leave tombstones
    stamped ``seq``; inside the caller's write transaction."""
    rows = [(chunk_id,) for chunk_id in ids]
    conn.executemany("DELETE FROM memory_chunks WHERE chunk_id = ?", rows)
    conn.executemany("DELETE FROM memory_vec WHERE chunk_id = ?", rows)
    changes.bury(conn, ids, seq)


def contains(scope: Mapping[str, str], axes: Mapping[str, str]) -> bool:
    """Whether ``scope`` holds every axis of ``axes`` with its value."""
    return all(scope.get(axis) == value for axis, value in axes.items())


def matching(conn: apsw.Connection, axes: Mapping[str, str]) -> list[str]:
    """Ids of the chunks whose scope contains ``axes``, in id order (one pass over
    the scope column; each distinct scope text parsed once)."""
    parsed: dict[str, bool] = {}
    out: list[str] = []
    for chunk_id, scope_json in conn.execute(
        "SELECT chunk_id, scope_json FROM memory_chunks ORDER BY chunk_id"
    ):
        text = str(scope_json)
        hit = parsed.get(text)
        if hit is None:
            hit = parsed[text] = contains(codec.loads(text), axes)
        if hit:
            out.append(str(chunk_id))
    return out


def _still_matching(
    conn: apsw.Connection, ids: Sequence[str], axes: Mapping[str, str]
) -> list[str]:
    out: list[str] = []
    for start in range(0, len(ids), _SQL_CHUNK):
        part = tuple(ids[start : start + _SQL_CHUNK])
        marks = ",".join("?" * len(part))
        for chunk_id, scope_json in conn.execute(
            f"SELECT chunk_id, scope_json FROM memory_chunks WHERE chunk_id IN ({marks})", part
        ):
            if contains(codec.loads(str(scope_json)), axes):
                out.append(str(chunk_id))
    return out


def erase_chosen(
    store: SqliteMemoryStore, choose: Callable[[apsw.Connection], Sequence[str]]
) -> list[str]:
    """One write transaction erasing the chunks ``choose(conn)`` picks inside it, then
    the in-process index mirrored and the erasure marked for flushing. Returns the ids
    erased."""
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
    pause_s: float = 0.0,
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
    for _round in range(_FORGET_ROUNDS):
        with store.database.read() as conn:
            ids = matching(conn, axes)
        if dry_run:
            return len(ids)
        if not ids:
            break
        for part in _batches(ids, batch):
            total += len(
                erase_chosen(store, functools.partial(_still_matching, ids=part, axes=axes))
            )
            if pause_s:
                time.sleep(pause_s)
    store.database.erasure.flush()
    return total


def _batches(ids: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for start in range(0, len(ids), size):
        yield ids[start : start + size]
