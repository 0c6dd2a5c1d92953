"""The memory plane's schema: an append-only list of migrations.

- ``memory_chunks``: the chunk (``record_json``, plus since migration 2 its
  embedding as float64 in ``embedding_f64`` when every element is a float — see
  :mod:`ratatoskr.memory.records`) and the structural columns the store reads
  (scope, origin, revision); ``seq`` is the change counter value of the write
  that last touched the row.
- ``memory_vec``: the sqlite-vec index (cosine, fixed dimension), one row per chunk.
- ``memory_tombstones``: ids deleted at a given ``seq``, so another process's
  in-memory index can catch up incrementally; pruned below a retention horizon
  (see :mod:`ratatoskr.memory.changes`).
- ``memory_counters``: the change counter ``seq`` and (migration 3) the horizon
  ``tombstones_pruned_through``.
- ``memory_idempotency``: the replay ledger, pruned by every write
  (:mod:`ratatoskr.sqlite.ledger`) through its ``expires_at`` index.
- ``memory_quota`` (migration 4): chunks and bytes per tenant (:data:`QUOTA`, kept
  by triggers on ``memory_chunks``; ``record_bytes`` is each chunk's canonical JSON
  length, see :mod:`bifrost.quota`), filled from the chunks already there.
- ``memory_chunks_updated_at`` (migration 6): the write time in order, for
  retention's expiry probe and sweep (:mod:`ratatoskr.memory.retention`).
- ``embedding_f32`` (migration 7): a float32-exact embedding as float32 instead of
  float64 (:func:`ratatoskr.memory.records.narrow_rows`); the table is rebuilt with
  the CHECKs of three forms, and the float32-exact rows already there narrowed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import apsw
import numpy as np

from bifrost.quota import record_size
from ratatoskr.memory import records
from ratatoskr.memory.changes import DIGEST_TOMBSTONES_SQL, HORIZON
from ratatoskr.memory.retention import UPDATED_AT_INDEX_SQL
from ratatoskr.sqlite import IdempotencyLedger, Migration, StorageCorrupt
from ratatoskr.sqlite.quota import TenantUsageTable

PLANE = "memory"
LEDGER = IdempotencyLedger("memory_idempotency")
QUOTA = TenantUsageTable("memory_quota", "memory_chunks", "record_bytes")
# Rows rewritten per statement batch by migration 2: bounds the memory a large
# file's upgrade holds, not its transaction (the whole upgrade is one).
_MIGRATE_BATCH = 1000


def migrations(embedding_dim: int) -> list[Migration]:
    """The migrations for a store of ``embedding_dim`` (fixed when the file is created)."""
    return [
        Migration(1, "chunks, vec index, tombstones, ledger", _create_v1(embedding_dim)),
        Migration(
            2, "embeddings as float64 beside record_json", _binary_embedding_v2(embedding_dim)
        ),
        Migration(3, "tombstone horizon, ledger expiry index", _V3),
        Migration(4, "per-tenant usage for quotas", _usage_v4),
        Migration(5, "tombstones keep a keyed digest of the id", DIGEST_TOMBSTONES_SQL),
        Migration(6, "write-time index for retention", UPDATED_AT_INDEX_SQL),
        Migration(7, "float32-exact embeddings as float32", _narrow_embeddings_v7(embedding_dim)),
    ]


# The horizon starts at 0 (no tombstone ever pruned). Every ledger has had its
# expiry index since migration 1; IF NOT EXISTS makes sure of it for any file.
_V3 = (
    f"INSERT OR IGNORE INTO memory_counters (name, value) VALUES ('{HORIZON}', 0);"
    + LEDGER.index_sql()
)


def vec_table_sql(dim: int) -> str:
    """DDL of the sqlite-vec index (unit vectors, cosine, fixed dimension)."""
    return (
        "CREATE VIRTUAL TABLE memory_vec USING vec0("
        f"chunk_id TEXT PRIMARY KEY, embedding float[{int(dim)}] distance_metric=cosine)"
    )


# memory_chunks' columns as migration 1 made them (migration 7 makes them again).
_V1_CHUNK_COLUMNS = """
    chunk_id TEXT PRIMARY KEY,
    record_json TEXT NOT NULL,
    revision INTEGER NOT NULL CHECK (revision >= 1),
    scope_json TEXT NOT NULL,
    origin TEXT,
    seq INTEGER NOT NULL,
    updated_at REAL NOT NULL"""


def _create_v1(dim: int) -> Callable[[apsw.Connection], None]:
    def create(conn: apsw.Connection) -> None:
        conn.execute(
            f"CREATE TABLE memory_chunks ({_V1_CHUNK_COLUMNS});"
            """
            CREATE INDEX memory_chunks_seq ON memory_chunks(seq);
            CREATE TABLE memory_tombstones (
                chunk_id TEXT PRIMARY KEY,
                seq INTEGER NOT NULL
            ) WITHOUT ROWID;
            CREATE INDEX memory_tombstones_seq ON memory_tombstones(seq);
            CREATE TABLE memory_counters (
                name TEXT PRIMARY KEY,
                value INTEGER NOT NULL
            ) WITHOUT ROWID;
            INSERT INTO memory_counters (name, value) VALUES ('seq', 0);
            """
        )
        conn.execute(vec_table_sql(dim))
        conn.execute(LEDGER.create_sql())

    return create


def _batches(conn: apsw.Connection, columns: str) -> Iterator[list[tuple[Any, ...]]]:
    """``memory_chunks``' rows (``rowid`` then ``columns``) in rowid order,
    :data:`_MIGRATE_BATCH` at a time (a migration may write between batches)."""
    last = 0
    while True:
        rows = conn.execute(
            f"SELECT rowid, {columns} FROM memory_chunks WHERE rowid > ? ORDER BY rowid LIMIT ?",
            (last, _MIGRATE_BATCH),
        ).fetchall()
        if not rows:
            return
        yield rows
        last = int(rows[-1][0])  # type: ignore[arg-type]


def _binary_embedding_v2(dim: int) -> Callable[[apsw.Connection], None]:
    """Add ``embedding_key`` / ``embedding_f64`` and move every all-float embedding out
    of ``record_json`` into them, in the migration's transaction (a crash or an
    error leaves the file at v1, whole)."""

    def migrate(conn: apsw.Connection) -> None:
        # The checks make a half-written binary form impossible: both columns or
        # neither, and a blob is exactly ``dim`` float64s.
        conn.execute(
            "ALTER TABLE memory_chunks ADD COLUMN embedding_key TEXT"
            " CHECK (embedding_key IN ('embedding', 'vector'));"
            "ALTER TABLE memory_chunks ADD COLUMN embedding_f64 BLOB"
            " CHECK ((embedding_f64 IS NULL) = (embedding_key IS NULL)"
            f" AND (embedding_f64 IS NULL OR length(embedding_f64) = {8 * int(dim)}));"
        )
        for rows in _batches(conn, "record_json"):
            updates: list[tuple[str, str, bytes, object]] = []
            for rowid, text in rows:
                try:
                    form = records.stored_form(records.load_json(str(text)))
                except (ValueError, TypeError, KeyError):
                    # Not a record v1 could have written; the upgrade rolls back whole.
                    raise StorageCorrupt("memory_chunks holds a record that is not valid") from None
                if form.embedding_key is not None and form.embedding_f64 is not None:
                    updates.append(
                        (form.record_json, form.embedding_key, form.embedding_f64, rowid)
                    )
            conn.executemany(
                "UPDATE memory_chunks SET record_json = ?, embedding_key = ?, embedding_f64 = ?"
                " WHERE rowid = ?",
                updates,
            )

    return migrate


def _usage_v4(conn: apsw.Connection) -> None:
    """``record_bytes`` of every chunk (its record rebuilt from the stored form, in
    batches), then ``memory_quota`` from them and its triggers, in the migration's
    transaction."""
    conn.execute("ALTER TABLE memory_chunks ADD COLUMN record_bytes INTEGER NOT NULL DEFAULT 0")
    for rows in _batches(conn, "record_json, embedding_key, embedding_f64"):
        sizes = [
            (record_size(records.StoredChunk(str(text), key, blob, 1).record()), rowid)
            for rowid, text, key, blob in rows
        ]
        conn.executemany("UPDATE memory_chunks SET record_bytes = ? WHERE rowid = ?", sizes)
    conn.execute(QUOTA.create_sql())


# memory_chunks as migration 7 leaves it (columns in the order migrations 1-4 made
# them, then embedding_f32): the embedding in at most one blob, named by its key.
_CHUNKS_V7 = (
    f"CREATE TABLE memory_chunks_v7 ({_V1_CHUNK_COLUMNS},"
    """
    embedding_key TEXT CHECK (embedding_key IN ('embedding', 'vector')),
    embedding_f64 BLOB CHECK (embedding_f64 IS NULL OR length(embedding_f64) = {f64}),
    record_bytes INTEGER NOT NULL DEFAULT 0,
    embedding_f32 BLOB CHECK (embedding_f32 IS NULL OR length(embedding_f32) = {f32}),
    CHECK ((embedding_key IS NULL) = (embedding_f64 IS NULL AND embedding_f32 IS NULL)),
    CHECK (embedding_f64 IS NULL OR embedding_f32 IS NULL)
)
"""
)
_V6_COLUMNS = (
    "chunk_id, record_json, revision, scope_json, origin, seq, updated_at,"
    " embedding_key, embedding_f64, record_bytes"
)


def _narrow_embeddings_v7(dim: int) -> Callable[[apsw.Connection], None]:
    """Rebuild ``memory_chunks`` with ``embedding_f32`` (SQLite cannot change a CHECK
    in place: migration 2's allows a key only beside a float64 blob), copying every
    row under its rowid with a float32-exact float64 blob narrowed, then its indexes
    and triggers (the quota's) as they were; all in the migration's transaction."""

    def migrate(conn: apsw.Connection) -> None:
        kept = [
            str(row[0])
            for row in conn.execute(
                "SELECT sql FROM sqlite_schema WHERE tbl_name = 'memory_chunks'"
                " AND type IN ('index', 'trigger') AND sql IS NOT NULL ORDER BY type, name"
            ).fetchall()
        ]
        conn.execute(_CHUNKS_V7.format(f64=8 * int(dim), f32=4 * int(dim)))
        for rows in _batches(conn, _V6_COLUMNS):
            wide = [i for i, row in enumerate(rows) if isinstance(row[9], bytes)]
            copied = [(*row, None) for row in rows]
            try:
                joined = b"".join(rows[i][9] for i in wide)
                matrix = np.frombuffer(joined, dtype="<f8").reshape(len(wide), int(dim))
                for i, f32 in zip(wide, records.narrow_rows(matrix), strict=True):
                    if f32 is not None:
                        copied[i] = (*rows[i][:9], None, rows[i][10], f32)
                conn.executemany(
                    f"INSERT INTO memory_chunks_v7 (rowid, {_V6_COLUMNS}, embedding_f32)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    copied,
                )
            except (ValueError, apsw.ConstraintError):
                # A row no v6 write makes; the upgrade rolls back whole.
                raise StorageCorrupt("memory_chunks holds a row that is not valid") from None
        conn.execute(
            "DROP TABLE memory_chunks; ALTER TABLE memory_chunks_v7 RENAME TO memory_chunks;"
        )
        for sql in kept:
            conn.execute(sql)

    return migrate


def rebuild_vec_table(conn: apsw.Connection) -> tuple[str, ...]:
    """Rebuild ``memory_vec`` when deleted vectors fill at least one of its chunks; runs
    inside a write transaction (the ``prepare`` step of a compaction).

    sqlite-vec 0.1 never reuses the slot of a deleted vector: its table keeps every
    vector ever inserted (1.5 KB each at 384 dims), so deleting 58% of a store and
    writing as many new chunks grew it by the same 58%. Copying the live vectors into
    a fresh table with the file's own DDL gives the space back (as free pages, which
    the vacuum then returns). Returns ``("memory_vec",)`` when it rebuilt, else ``()``.
    """
    if not all(conn.table_exists(None, t) for t in ("memory_vec_chunks", "memory_vec_rowids")):
        return ()  # a sqlite-vec with another layout: nothing known to reclaim
    # The shadow tables of sqlite-vec 0.1: one row per chunk of ``size`` slots, one
    # row per live vector.
    chunks, size = conn.execute(
        "SELECT count(*), coalesce(max(size), 0) FROM memory_vec_chunks"
    ).fetchall()[0]
    live = int(conn.execute("SELECT count(*) FROM memory_vec_rowids").fetchall()[0][0])  # type: ignore[arg-type]
    if int(size) < 1 or int(chunks) <= math.ceil(live / int(size)):  # type: ignore[arg-type]
        return ()
    ddl = conn.execute(
        "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'memory_vec'"
    ).fetchall()[0][0]
    conn.execute(
        "DROP TABLE IF EXISTS temp.memory_vec_live;"
        "CREATE TEMP TABLE memory_vec_live (chunk_id TEXT NOT NULL, embedding BLOB NOT NULL);"
        "INSERT INTO temp.memory_vec_live SELECT chunk_id, embedding FROM memory_vec;"
        "DROP TABLE memory_vec;"
    )
    conn.execute(str(ddl))
    conn.execute(
        "INSERT INTO memory_vec (chunk_id, embedding)"
        " SELECT chunk_id, embedding FROM temp.memory_vec_live;"
        "DROP TABLE temp.memory_vec_live;"
    )
    return ("memory_vec",)
