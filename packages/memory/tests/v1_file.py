"""A memory file exactly as schema v1 wrote it, built with migration 1 alone.

No v1 store code remains, so the rows are written here the way v1's
``_write_chunks`` wrote them: the whole record as canonical JSON in
``record_json`` (embedding included), the float32 unit vector in ``memory_vec``,
the change counter, and a ledger entry for the batch.
"""

from __future__ import annotations

import sys
from typing import Any

from bifrost.idempotency import idempotency_id, request_digest
from bifrost.jsoncodec import canonical_json
from bifrost.memory.validation import embedding_field, record_id, validate_embedding
from ratatoskr.memory.records import unit_float32
from ratatoskr.memory.schema import LEDGER, PLANE, migrations
from ratatoskr.sqlite import ConnectionOptions, Database, MetaSetting, codec

ACTOR = "agent-1"
KEY = "v1-batch"


def open_v1(path: str, dim: int) -> Database:
    """The file at ``path`` opened (created) at schema v1."""
    return Database(
        path,
        plane=PLANE,
        migrations=migrations(dim)[:1],
        meta={"embedding_dim": MetaSetting(str(dim), "embedding_dim")},
        options=ConnectionOptions(load_vec=True),
    )


def write_v1_file(path: str, recs: list[dict[str, Any]], *, dim: int, batch: int = 100) -> None:
    """Create ``path`` at schema v1 holding ``recs`` (revision 1), with a ledger entry
    for an upsert of the first ``batch`` of them under ``KEY``."""
    db = open_v1(path, dim)
    try:
        with db.write() as conn:
            for rec in recs:
                cid = record_id(rec)
                emb = validate_embedding(rec[embedding_field(rec)], dim)
                origin = rec.get("origin")
                conn.execute(
                    "INSERT INTO memory_chunks"
                    " (chunk_id, record_json, revision, scope_json, origin, seq, updated_at)"
                    " VALUES (?, ?, 1, ?, ?, 1, 0.0)",
                    (
                        cid,
                        canonical_json(rec).decode("utf-8"),
                        codec.dumps(dict(sorted(rec["scope"].items()))),
                        origin if isinstance(origin, str) else None,
                    ),
                )
                conn.execute(
                    "INSERT INTO memory_vec (chunk_id, embedding) VALUES (?, ?)",
                    (cid, unit_float32(emb).tobytes()),
                )
            conn.execute("UPDATE memory_counters SET value = 1 WHERE name = 'seq'")
            LEDGER.record(
                conn,
                idempotency_id("upsert_many", ACTOR, KEY),
                digest=request_digest(recs[:batch], None),
                result={"upserted": len(recs[:batch]), "replayed": False},
                expires_at=sys.float_info.max,
            )
    finally:
        db.close()
