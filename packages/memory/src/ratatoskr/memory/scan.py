"""``scan`` on the SQLite store: keyset pages of whole records in ``chunk_id`` order.

A scan with no scope and no filter walks the primary key (``chunk_id > ? ORDER BY
chunk_id LIMIT ?``: SQLite's BINARY order of UTF-8 text is code-point order). Any
other scan takes its ids from the in-process index — the rows of the selected scope
classes, narrowed by the filter columns (:mod:`ratatoskr.memory.filtered`), the
smallest above ``after_id`` — so a page costs what the in-scope rows cost, never a
walk of the whole table. As in a search, the index is read at its ``seq`` and the
records are fetched in one read snapshot together with the database's change counter;
when another process wrote meanwhile, the index catches up inside that snapshot.

Keyset pagination gives the guarantee the wire asks for: a record that exists,
unchanged and in scope for the whole walk has an id above the previous page's last
and is read in the snapshot of the page that reaches it, so it appears exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import apsw

from bifrost.memory.validation import ScanQuery, scan_item
from ratatoskr.memory.index import VectorIndex
from ratatoskr.memory.records import StoredChunk
from ratatoskr.memory.sync import SyncedIndex
from ratatoskr.sqlite import Database, StorageUnavailable

__all__ = ["scan_rows"]

_SNAPSHOT_ATTEMPTS = 50
_PAGE_SQL = (
    "SELECT chunk_id, record_json, embedding_key, embedding_f64, revision, embedding_f32"
    " FROM memory_chunks"
    " WHERE chunk_id > ? ORDER BY chunk_id LIMIT ?"
)

FetchAt = Callable[[apsw.Connection, Sequence[str]], tuple[dict[str, StoredChunk], int]]
# Ids a page must leave out, decided in its snapshot (retention's expired chunks).
Drop = Callable[[apsw.Connection, Sequence[str]], set[str]]


def _item(chunk: StoredChunk, include_embedding: bool) -> dict[str, Any]:
    # ``without_embedding`` knows which field held the embedding (a record may keep an
    # opaque ``vector`` field beside its ``embedding``).
    record = chunk.record() if include_embedding else chunk.without_embedding()
    return scan_item(record, chunk.revision, True)


def scan_rows(
    db: Database, sync: SyncedIndex, query: ScanQuery, fetch_at: FetchAt, drop: Drop | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """Up to ``query.limit + 1`` ``(chunk_id, record)`` pairs of ``query`` in id order,
    read in one snapshot, without the ids ``drop(conn, page_ids)`` names in it
    (:func:`ratatoskr.memory.retention.scan_live` reads on past them). Raises
    StorageUnavailable when the index cannot catch up with concurrent writes,
    StorageError subclasses."""
    count = query.limit + 1
    if not query.scope_all and not query.scope_any and query.metadata_filter is None:
        with db.read() as conn:
            rows = conn.execute(_PAGE_SQL, (query.after_id or "", count)).fetchall()
            gone = set() if drop is None else drop(conn, [str(r[0]) for r in rows])
        return [
            (
                str(cid),
                _item(
                    StoredChunk(str(rj), None if key is None else str(key), blob, int(rev), f32),  # type: ignore[arg-type]
                    query.include_embedding,
                ),
            )
            for cid, rj, key, blob, rev, f32 in rows
            if str(cid) not in gone
        ]

    def page(index: VectorIndex) -> list[str]:
        return index.scan_ids(
            query.scope_all, query.scope_any, query.metadata_filter, query.after_id, count
        )

    for _attempt in range(_SNAPSHOT_ATTEMPTS):
        with db.read() as conn:
            seq, ids = sync.read_now(page)
            found, db_seq = fetch_at(conn, ids)
            if db_seq != seq:
                current, again = sync.read_at(conn, db_seq, page)
                if not current or again is None:
                    continue  # the index moved past this snapshot: take a newer one
                ids = again
                found = fetch_at(conn, ids)[0]
            if drop is not None:
                for chunk_id in drop(conn, ids):
                    found.pop(chunk_id, None)
        break
    else:
        raise StorageUnavailable("the index could not catch up with concurrent writes")
    return [(i, _item(found[i], query.include_embedding)) for i in ids if i in found]
