"""Export and import of the SQLite memory store (``ratatoskr export`` / ``import``).

**Export** reads keyset pages in ``chunk_id`` order (SQLite's binary collation:
code-point order), each page one read snapshot: a chunk that exists unchanged
for the whole export is read exactly once; one written or deleted meanwhile
appears as some page saw it, or not at all. A chunk expired under the store's
retention (:mod:`ratatoskr.memory.retention`) is left out, as every verb leaves
it out. Nothing is written, so an export runs beside a serving provider.

**Import** writes one validated batch (:mod:`bifrost.portability`) in one
``BEGIN IMMEDIATE`` transaction: what the file holds under the batch's ids is
read, the retention cutoff taken, :func:`~bifrost.portability.plan_import`
decides, and the new and replaced chunks are written with their revisions and
write times, their vec0 rows and one change-counter step — the path another
process's in-memory index catches up along. The store's own index is not
mirrored: its next search catches up from the database like any other process's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import apsw

from bifrost.jsoncodec import canonical_json
from bifrost.memory.retention import is_expired
from bifrost.portability import (
    ExportedChunk,
    Held,
    ImportedChunks,
    ImportOutcome,
    OnConflict,
    expired_entries,
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
    db: Database,
    after_id: str | None,
    limit: int,
    scope_all: Mapping[str, str],
    cutoff: float | None,
) -> tuple[list[ExportedChunk], str | None]:
    """Up to ``limit`` chunks after ``after_id`` in id order (one read snapshot), those
    whose scope contains ``scope_all`` and not expired under ``cutoff`` (None: nothing
    expires); and the cursor of the next page (None: done)."""
    with db.read() as conn:
        rows = conn.execute(
            "SELECT chunk_id, scope_json, record_json, embedding_key, embedding_f64, revision,"
            " updated_at FROM memory_chunks WHERE chunk_id > ? ORDER BY chunk_id LIMIT ?",
            ("" if after_id is None else after_id, limit),
        ).fetchall()
    out: list[ExportedChunk] = []
    scopes: dict[str, dict[str, str]] = {}
    for cid, sj, rj, key, blob, revision, updated_at in rows:
        if is_expired(float(updated_at), cutoff):  # type: ignore[arg-type]
            continue
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


def _held(conn: apsw.Connection, ids: Sequence[str]) -> dict[str, tuple[StoredChunk, float]]:
    """The chunks held under ``ids``, each with its write time."""
    out: dict[str, tuple[StoredChunk, float]] = {}
    for start in range(0, len(ids), _SQL_CHUNK):
        part = tuple(ids[start : start + _SQL_CHUNK])
        for cid, rj, key, blob, revision, at in conn.execute(
            "SELECT chunk_id, record_json, embedding_key, embedding_f64, revision, updated_at"
            f" FROM memory_chunks WHERE chunk_id IN ({','.join('?' * len(part))})",
            part,
        ):
            chunk = StoredChunk(str(rj), None if key is None else str(key), blob, int(revision))
            out[str(cid)] = (chunk, float(at))
    return out


def import_chunks(
    db: Database,
    batch: ImportedChunks,
    on_conflict: OnConflict,
    *,
    embedding_dim: int,
    tombstone_retention: int,
    cutoff: Callable[[], float | None],
    allow_scope_change: bool = False,
) -> ImportOutcome:
    """Write ``batch`` with its revisions and write times, in one transaction (see the
    module docstring); ``cutoff`` reads the store's retention cutoff. Raises
    ImportConflict, ImportScopeChange (nothing written), StorageError subclasses."""
    items = batch.request.items
    ids = list(batch.request.ids)
    # Outside the transaction: the stored forms need nothing the database holds.
    forms, units = stored_forms(items, embedding_dim)
    with db.write() as conn:
        at = cutoff()
        found = _held(conn, ids)
        held: dict[str, Held] = {}
        for i, cid in enumerate(ids):
            if cid not in found:
                continue
            stored, written_at = found[cid]
            record = stored.record()
            held[cid] = Held(
                same=stored.revision >= batch.revisions[i] and same_record(record, items[i].record),
                revision=stored.revision,
                rescoped=record.get("scope") != dict(items[i].scope),
                expired=is_expired(written_at, at),
            )
        plan = plan_import(
            ids,
            batch.revisions,
            held,
            on_conflict,
            expired=expired_entries(batch, at),
            allow_scope_change=allow_scope_change,
        )
        new, over = plan.new, plan.over
        if not new and not over:
            return plan.outcome
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
                    plan.revisions[i],
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
    return plan.outcome
