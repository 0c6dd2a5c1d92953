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
import numpy as np
import numpy.typing as npt

from bifrost import portability
from bifrost.jsoncodec import canonical_json
from bifrost.memory.retention import is_expired
from bifrost.scope import matches_scope
from ratatoskr.memory import changes
from ratatoskr.memory.records import StoredChunk, StoredForm, stored_forms
from ratatoskr.sqlite import Database, codec
from ratatoskr.sqlite.keys import keyset_page, rows_in

__all__ = ["export_page", "import_chunks"]

# What an export reads of a chunk after its id.
_EXPORTED = (
    "scope_json, record_json, embedding_key, embedding_f64, revision, updated_at, embedding_f32"
)


def export_page(
    db: Database,
    after_id: str | None,
    limit: int,
    scope_all: Mapping[str, str],
    cutoff: float | None,
) -> tuple[list[portability.ExportedChunk], str | None]:
    """Up to ``limit`` chunks after ``after_id`` in id order (one read snapshot), those
    whose scope contains ``scope_all`` and not expired under ``cutoff`` (None: nothing
    expires); and the cursor of the next page (None: done)."""
    with db.read() as conn:
        rows, cursor = keyset_page(conn, "memory_chunks", "chunk_id", _EXPORTED, after_id, limit)
    out: list[portability.ExportedChunk] = []
    scopes: dict[str, dict[str, str]] = {}
    for cid, sj, rj, key, blob, revision, updated_at, f32 in rows:
        at = float(updated_at)
        if is_expired(at, cutoff):
            continue
        if scope_all:
            text = str(sj)
            scope = scopes.get(text)
            if scope is None:
                scope = scopes[text] = codec.loads(text)
            if not matches_scope(scope, scope_all, None):
                continue
        stored = StoredChunk(str(rj), None if key is None else str(key), blob, int(revision), f32)
        out.append(portability.ExportedChunk(str(cid), stored.record(), stored.revision, at))
    return out, cursor


class _ImportTx:
    """One import batch's SQL inside ``BEGIN IMMEDIATE`` (bifrost.portability.ChunkImportTx)."""

    def __init__(
        self,
        conn: apsw.Connection,
        forms: list[StoredForm],
        units: npt.NDArray[np.float32],
        tombstone_retention: int,
        cutoff: Callable[[], float | None],
    ) -> None:
        self._conn = conn
        self._forms = forms
        self._units = units
        self._tombstone_retention = tombstone_retention
        self.cutoff = cutoff

    def held(self, ids: Sequence[str]) -> dict[str, portability.HeldChunk]:
        out: dict[str, portability.HeldChunk] = {}
        for cid, rj, key, blob, revision, at, f32 in rows_in(
            self._conn,
            "SELECT chunk_id, record_json, embedding_key, embedding_f64, revision, updated_at,"
            " embedding_f32 FROM memory_chunks WHERE chunk_id IN ({keys})",
            ids,
        ):
            chunk = StoredChunk(
                str(rj), None if key is None else str(key), blob, int(revision), f32
            )
            out[str(cid)] = portability.HeldChunk(chunk.record(), chunk.revision, float(at))
        return out

    def write(self, batch: portability.ImportedChunks, plan: portability.ImportPlan) -> None:
        conn, items, units = self._conn, batch.request.items, self._units
        new, over = plan.new, plan.over
        seq = changes.seq(conn) + 1
        rows = [self._row(batch, i, plan.revisions[i], seq) for i in new + over]
        if new:
            conn.executemany(
                "INSERT INTO memory_chunks (record_json, embedding_key, embedding_f64,"
                " embedding_f32, revision, scope_json, origin, seq, updated_at, chunk_id)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows[: len(new)],
            )
            conn.executemany(
                "INSERT INTO memory_vec (chunk_id, embedding) VALUES (?, ?)",
                [(items[i].id, units[i].tobytes()) for i in new],
            )
            changes.unbury(conn, [items[i].id for i in new])
        if over:
            conn.executemany(
                "UPDATE memory_chunks SET record_json = ?, embedding_key = ?, embedding_f64 = ?,"
                " embedding_f32 = ?, revision = ?, scope_json = ?, origin = ?, seq = ?,"
                " updated_at = ?"
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
        changes.prune(
            conn, at=seq, retention=self._tombstone_retention, limit=changes.PRUNE_PER_WRITE
        )

    def _row(
        self, batch: portability.ImportedChunks, i: int, revision: int, seq: int
    ) -> tuple[Any, ...]:
        form, chunk = self._forms[i], batch.request.items[i]
        origin = chunk.record.get("origin")
        return (
            form.record_json,
            form.embedding_key,
            form.embedding_f64,
            form.embedding_f32,
            revision,
            codec.dumps(dict(sorted(chunk.scope.items()))),
            origin if isinstance(origin, str) else None,
            seq,
            batch.written_at[i],
            chunk.id,
        )


def import_chunks(
    db: Database,
    batch: portability.ImportedChunks,
    on_conflict: portability.OnConflict,
    *,
    embedding_dim: int,
    tombstone_retention: int,
    cutoff: Callable[[], float | None],
    allow_scope_change: bool = False,
) -> portability.ImportOutcome:
    """One ``BEGIN IMMEDIATE`` transaction for ``batch``: bifrost decides, the SQL
    above reads and writes. Raises ImportConflict, ImportScopeChange (nothing
    written), StorageError subclasses."""
    # Outside the transaction: the stored forms need nothing the database holds.
    forms, units = stored_forms(batch.request.items, embedding_dim)
    with db.write() as conn:
        tx = _ImportTx(conn, forms, units, tombstone_retention, cutoff)
        return portability.import_chunk_batch(
            tx, batch, on_conflict, allow_scope_change=allow_scope_change
        )
