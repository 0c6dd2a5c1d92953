"""The memory plane's schema: an append-only list of migrations.

- ``memory_chunks``: the verbatim chunk (``record_json``) and the structural
  columns the store reads (scope, origin, revision); ``seq`` is the change
  counter value of the write that last touched the row.
- ``memory_vec``: the sqlite-vec index (cosine, fixed dimension), one row per chunk.
- ``memory_tombstones``: ids deleted at a given ``seq``, so another process's
  in-memory index can catch up incrementally.
- ``memory_counters``: the change counter ``seq``.
- ``memory_idempotency``: the replay ledger.
"""

from __future__ import annotations

from collections.abc import Callable

import apsw

from ratatoskr.sqlite import IdempotencyLedger, Migration

PLANE = "memory"
LEDGER = IdempotencyLedger("memory_idempotency")


def migrations(embedding_dim: int) -> list[Migration]:
    """The migrations for a store of ``embedding_dim`` (fixed when the file is created)."""
    return [Migration(1, "chunks, vec index, tombstones, ledger", _create_v1(embedding_dim))]


def _create_v1(dim: int) -> Callable[[apsw.Connection], None]:
    def create(conn: apsw.Connection) -> None:
        conn.execute(
            """
            CREATE TABLE memory_chunks (
                chunk_id TEXT PRIMARY KEY,
                record_json TEXT NOT NULL,
                revision INTEGER NOT NULL CHECK (revision >= 1),
                scope_json TEXT NOT NULL,
                origin TEXT,
                seq INTEGER NOT NULL,
                updated_at REAL NOT NULL
            );
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
        conn.execute(
            "CREATE VIRTUAL TABLE memory_vec USING vec0("
            f"chunk_id TEXT PRIMARY KEY, embedding float[{int(dim)}] distance_metric=cosine)"
        )
        conn.execute(LEDGER.create_sql())

    return create
