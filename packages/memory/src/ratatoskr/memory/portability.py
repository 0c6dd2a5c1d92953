"""Export and import of the SQLite memory store (``ratatoskr export`` / ``import``).

**Export** reads keyset pages in ``chunk_id`` order (SQLite's binary collation:
code-point order), each page one read snapshot: a chunk that exists unchanged
for the whole export is read exactly once; one written or deleted meanwhile
appears as some page saw it, or not at all. Nothing is written, so an export
runs beside a serving provider.

**Import** writes one validated batch (:mod:`bifrost.portability`) in one
``BEGIN IMMEDIATE`` transaction: what the file holds under the batch's ids is
read, :func:`~bifrost.portability.plan_import` decides, and the new and
replaced chunks are written with their own revisions and write times, their
vec0 rows and one change-counter step — the path another process's in-memory
index catches up along. The store's own index is not mirrored: its next search
catches up from the database like any other process's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import apsw

from bifrost.jsoncodec import canonical_json
from bifrost.portability import (
    ExportedChunk,
    ImportedChunks,
    ImportOutcome,
    OnConflict,
    plan_import,
    same_record,
)
from bifrost.scope import matches_scope
from ratatoskr.memory import changes
from ratatoskr.memory.records import StoredChunk, stored_forms
from ratatoskr.sqlite import Database, codec

__all__ = ["export_page", "import_chunks"]

_SQL_CHUNK = 500


def export_page(
    db: Database, after_id: str | None, limit: int, scope_all: Mapping[str, str]
) -> tuple[list[ExportedChunk], str | None]:
    """Up to ``limit`` chunks after ``after_id`` in id order (one read snapshot), those
    whose scope contains ``scope_all``; and the cursor of the next page (None: done)."""
    with db.read() as conn:
        rows = conn.execute(
            "SELECT chunk_id, scope_json, record_json, embedding_key, embedding_f64, revision,"
            " updated_at FROM memory_chunks WHERE chunk_id > ? ORDER BY chunk_id LIMIT ?",
            ("" if after_id is None else after_id, limit),
        ).fetchall()
    out: list[ExportedChunk] = []
    scopes: dict[str, dict[str, str]] = {}
    for cid, sj, rj, key, blob, revision, updated_at in rows:
        if scope_all:
            text = str(sj)
            scope = scopes.get(text)
            if scope is None:
                scope = scopes[text] = codec.loads(text)
            if not matches_scope(scope, scope_all, None):
                continue
        stored = StoredChunk(str(rj), None if key is None else str(key), blob, int(revision))  # type: ignore[arg-type]
        out.append(ExportedChunk(str(cid), stored.record(), stored.revision, float(updated_at)))  # type: ignore[arg-type]
    cursor = str(rows[-1][0]) if len(rows) == limit else None
    return out, cursor


def _held(conn: apsw.Connection, ids: Sequence[str]) -> dict[str, StoredChunk]:
    out: dict[str, StoredChunk] = {}
    for start in range(0, len(ids), _SQL_CHUNK):
        part = tuple(ids[start : start + _SQL_CHUNK])
        for cid, rj, key, blob, revision in conn.execute(
            "SELECT chunk_id, record_json, embedding_key, embedding_f64, revision"
            f" FROM memory_chunks WHERE chunk_id IN ({','.join('?' * len(part))})",
            part,
        ):
            out[str(cid)] = StoredChunk(
                str(rj), None if key is None else str(key), blob, int(revision)
            )
    return out


def import_chunks(
    db: Database,
    batch: ImportedChunks,
    on_conflict: OnConflict,
    *,
    embedding_dim: int,
    tombstone_retention: int,
) -> ImportOutcome:
    """Write ``batch`` with its revisions and write times, in one transaction (see the
    module docstring). Raises ImportConflict (nothing written), StorageError subclasses."""
    items = batch.request.items
    ids = list(batch.request.ids)
    # Outside the transaction: the stored forms need nothing the database holds.
    forms, units = stored_forms(items, embedding_dim)
    with db.write() as conn:
        held = _held(conn, ids)
        same = {
            cid: held[cid].revision == batch.revisions[i]
            and same_record(held[cid].record(), items[i].record)
            for i, cid in enumerate(ids)
            if cid in held
        }
        new, over, outcome = plan_import(ids, same, on_conflict)
        if not new and not over:
            return outcome
        seq = changes.seq(conn) + 1
        rows: list[tuple[Any, ...]] = []
        for i in new + over:
            form, chunk = forms[i], items[i]
            origin = chunk.record.get("origin")
            rows.append(
                (
                    form.record_json,
                    form.embedding_key,
                    form.embedding_f64,
                    batch.revisions[i],
                    codec.dumps(dict(sorted(chunk.scope.items()))),
                    origin if isinstance(origin, str) else None,
                    seq,
                    batch.written_at[i],
                    chunk.id,
                )
            )
        inserted = rows[: len(new)]
        if inserted:
            conn.executemany(
                "INSERT INTO memory_chunks (record_json, embedding_key, embedding_f64,"
                " revision, scope_json, origin, seq, updated_at, chunk_id)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                inserted,
            )
            conn.executemany(
                "INSERT INTO memory_vec (chunk_id, embedding) VALUES (?, ?)",
                [(items[i].id, units[i].tobytes()) for i in new],
            )
            changes.unbury(conn, [items[i].id for i in new])
        if over:
            conn.executemany(
                "UPDATE memory_chunks SET record_json = ?, embedding_key = ?, embedding_f64 = ?,"
                " revision = ?, scope_json = ?, origin = ?, seq = ?, updated_at = ?"
                " WHERE chunk_id = ?",
                rows[len(new) :],
            )
            conn.executemany(
                "UPDATE memory_vec SET embedding = ? WHERE chunk_id = ?",
                [(units[i].tobytes(), items[i].id) for i in over],
            )
        if conn.execute(
            "SELECT 1 FROM pragma_table_info('memory_chunks') WHERE name = 'record_bytes'"
        ).fetchall():
            # A file with per-tenant usage (bifrost.quota): its triggers follow this column.
            conn.executemany(
                "UPDATE memory_chunks SET record_bytes = ? WHERE chunk_id = ?",
                [(len(canonical_json(items[i].record)), items[i].id) for i in new + over],
            )
        changes.set_seq(conn, seq)
        changes.prune(conn, at=seq, retention=tombstone_retention, limit=changes.PRUNE_PER_WRITE)
    return outcome
