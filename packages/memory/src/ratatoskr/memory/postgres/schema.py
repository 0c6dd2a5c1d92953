"""The memory plane's PostgreSQL schema: an append-only list of migrations.

``memory_chunks`` holds one row per chunk: the stored form of the record
(``record_json`` plus, for all-float embeddings, ``embedding_key`` and the
lossless float64 ``embedding_f64`` — the SQLite store's form, see
``ratatoskr.memory.records``), the scope as one column per lattice axis, the
revision, and ``embedding``: the unit float32 vector (pgvector) that ranks
candidates. Vector and record are one row, so "one index row per chunk" holds
by construction.

- ``record_json`` and ``embedding_f64`` are ``STORAGE EXTERNAL``: out of line but
  never compressed. pglz spends its time on random floats and saves nothing
  (measured: docs/decisions.md).
- ``embedding`` is ``STORAGE MAIN``: kept in the heap row unless nothing else can
  move out. pgvector's default (EXTERNAL) let TOAST move the 1.5 KB vector out
  before a smaller record_json, and every scanned row then cost a TOAST fetch
  (docs/decisions.md). MAIN rather
  than PLAIN, so a dimension too large for a heap page still works, out of line.
- A btree per scope axis (partial: only rows that carry the axis), so scoped
  searches read only the in-scope rows.
- Migration 2: the tenant index also carries ``chunk_id`` and ``embedding``
  (``INCLUDE``), so a search scoped by tenant is an index-only scan: a tenant's
  rows sit together in the index's leaf pages (about 5 per page at 384 dims)
  where the heap scatters them (about one page each; measured in
  docs/decisions.md). A btree entry holds at most ~2.7 KB, so this index exists
  only when the vector fits (``embedding_dim`` ≤ :data:`COVERED_DIM_MAX`, 472)
  and holds tenants of at most :data:`COVERED_TENANT_BYTES` (a search adds that
  bound to its filter when its tenant is that short, see
  ``ratatoskr.postgres.scope``; a longer tenant's rows are found through the
  plain index); above
  that the migration records itself and changes nothing, and tenant-scoped
  searches keep the plain index. The plain tenant index stays: a conjunction
  with another axis intersects the small one. (Index-only scans need the
  visibility map, which autovacuum keeps; a page written since its last pass is
  read from the heap, correct either way.)
- **No HNSW / IVFFlat index**, ever: the planner would pick it for some scoped
  searches depending on statistics, and the result would silently stop being
  the exact top_k (measured on pgvector 0.8: recall 0.79 at a 1% scope).
- Text columns use ``COLLATE "C"``: byte order, which is code-point order, and
  the cheapest comparison.
- Migration 3: ``record_bytes``, each chunk's canonical JSON length (filled for the
  rows already there from their stored form), and ``memory_quota``, chunks and bytes
  per tenant kept by triggers (:data:`USAGE_TABLE`, see ``ratatoskr.postgres.quota``
  and ``bifrost.quota``).
- Migration 6: where the covering index exists, ``embedding`` is ``STORAGE PLAIN``
  (the table's column and, with it, the index's). A btree entry is compressed when
  it holds a value over 512 bytes whose storage allows compression (``MAIN``
  does), so every write tried pglz on its 1.5 KB of random floats and kept the
  original: 9 µs of server CPU per chunk, ~10% of an upsert's (measured:
  docs/postgres.md). The row cannot outgrow a page: the vector is at most 1.9 KB
  there and every other variable column can still move out of line. Above
  :data:`COVERED_DIM_MAX` the column stays ``MAIN``.
- Migration 7: ``embedding_f32``, the float32 blob of an embedding whose every
  element is float32-exact (what numpy float32 clients send), instead of the float64
  one (``ratatoskr.memory.postgres.stored``): half the bytes, one TOAST tuple a chunk
  instead of two.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg import Cursor, sql

from bifrost.quota import record_size
from ratatoskr.memory.postgres.retention import updated_at_index
from ratatoskr.memory.records import StoredChunk
from ratatoskr.postgres.extension import ensure_vector_extension
from ratatoskr.postgres.migrations import Migration, qualified
from ratatoskr.postgres.scope import AXIS_COLUMNS, scope_column_definitions
from ratatoskr.postgres.store import PlaneTables

__all__ = [
    "CHUNKS",
    "COVERED_DIM_MAX",
    "COVERED_TENANT_BYTES",
    "COVERING_INDEX",
    "LEDGER_TABLE",
    "PLANE",
    "TABLES",
    "USAGE_TABLE",
    "migrations",
]

PLANE = "memory"
CHUNKS = "memory_chunks"
LEDGER_TABLE = "memory_idempotency"
USAGE_TABLE = "memory_quota"
# The ledger, and the per-tenant usage of the chunks (bifrost.quota).
TABLES = PlaneTables(LEDGER_TABLE, USAGE_TABLE, CHUNKS, "record_bytes")
# Rows whose record_bytes migration 3 computes per statement.
_MIGRATE_BATCH = 1000
COVERING_INDEX = f"{CHUNKS}_tenant_vectors"
# The tenants the covering index holds: stored values of at most this many bytes
# (a search for a longer tenant uses the plain index; see ratatoskr.postgres.scope).
COVERED_TENANT_BYTES = 256
# The largest dimension whose entry fits a btree (at most 2704 bytes on 8 KB pages):
# an 8-byte tuple header, the tenant and a chunk id of at most 512 bytes (4-byte
# varlena headers each), the vector (8 + 4 per dimension), the write time (8) and
# alignment slack.
COVERED_DIM_MAX = (2704 - 8 - (4 + COVERED_TENANT_BYTES) - (4 + 512) - 8 - 8 - 24) // 4


def migrations(schema: str, embedding_dim: int) -> list[Migration]:
    """The migrations of a memory store in ``schema`` (the dimension is fixed at creation)."""
    return [
        Migration(1, "chunks with unit vectors, scope columns, ledger", _v1(schema, embedding_dim)),
        Migration(2, "tenant index covering chunk_id and embedding", _v2(schema, embedding_dim)),
        Migration(3, "per-tenant usage for quotas", _v3(schema)),
        Migration(4, "write-time index for retention", updated_at_index(qualified(schema, CHUNKS))),
        Migration(5, "tenant index covering the write time too", _v5(schema, embedding_dim)),
        Migration(6, "covered vectors stored uncompressed", _v6(schema, embedding_dim)),
        Migration(7, "float32 blob for float32-exact embeddings", _v7(schema, embedding_dim)),
    ]


def _v1(schema: str, dim: int) -> Callable[[Cursor[Any]], None]:
    def create(cur: Cursor[Any]) -> None:
        ext = ensure_vector_extension(cur)
        t = qualified(schema, CHUNKS)
        cur.execute(
            sql.SQL(
                "CREATE TABLE {t} ("
                ' chunk_id text COLLATE "C" PRIMARY KEY, {scope},'
                " revision bigint NOT NULL CHECK (revision >= 1),"
                " record_json text NOT NULL,"
                " embedding_key text CHECK (embedding_key IN ('embedding', 'vector')),"
                # Both or neither, and exactly dim float64s: a half-written binary form
                # cannot exist.
                " embedding_f64 bytea CHECK ((embedding_f64 IS NULL) = (embedding_key IS NULL)"
                " AND (embedding_f64 IS NULL OR octet_length(embedding_f64) = {nbytes})),"
                " embedding {vector} NOT NULL,"
                " updated_at double precision NOT NULL);"
                " ALTER TABLE {t} ALTER COLUMN record_json SET STORAGE EXTERNAL,"
                " ALTER COLUMN embedding_f64 SET STORAGE EXTERNAL,"
                " ALTER COLUMN embedding SET STORAGE MAIN;"
            ).format(
                t=t,
                scope=scope_column_definitions(),
                nbytes=sql.Literal(8 * dim),
                vector=sql.SQL("{}.vector({})").format(sql.Identifier(ext), sql.Literal(dim)),
            )
        )
        for column in AXIS_COLUMNS.values():
            cur.execute(
                # Partial: a chunk without the axis costs no index entry, and a filter
                # ``axis = value`` implies ``axis IS NOT NULL``, so the planner uses it.
                sql.SQL("CREATE INDEX {i} ON {t} ({c}) WHERE {c} IS NOT NULL").format(
                    i=sql.Identifier(f"{CHUNKS}_{column}"), t=t, c=sql.Identifier(column)
                )
            )
        cur.execute(TABLES.ledger_in(schema).create_sql())

    return create


def _v2(schema: str, dim: int) -> Callable[[Cursor[Any]], None]:
    return _covering_index(schema, dim, ("chunk_id", "embedding"))


def _v5(schema: str, dim: int) -> Callable[[Cursor[Any]], None]:
    """Every read checks the write time (retention's ``LIVE_SQL``): without it in the
    covering index a tenant's search could no longer be an index-only scan."""
    return _covering_index(schema, dim, ("chunk_id", "embedding", "updated_at"), replace=True)


def _v6(schema: str, dim: int) -> Callable[[Cursor[Any]], None]:
    """``embedding`` ``STORAGE PLAIN`` where the covering index exists (module docstring):
    a catalog change, no row rewritten; index entries written before stay readable."""

    def alter(cur: Cursor[Any]) -> None:
        if dim > COVERED_DIM_MAX:
            return  # no covering index; MAIN lets a vector too large for a page move out
        cur.execute(
            sql.SQL("ALTER TABLE {t} ALTER COLUMN embedding SET STORAGE PLAIN").format(
                t=qualified(schema, CHUNKS)
            )
        )

    return alter


def _v7(schema: str, dim: int) -> Callable[[Cursor[Any]], None]:
    """``embedding_f32`` beside ``embedding_f64`` (``ratatoskr.memory.postgres.stored``),
    and the check of migration 1 widened to it: the key with exactly one blob of its
    length, or neither. Rows already there keep their float64 blob."""

    def alter(cur: Cursor[Any]) -> None:
        cur.execute(
            sql.SQL(
                "ALTER TABLE {t} ADD COLUMN embedding_f32 bytea,"
                " ALTER COLUMN embedding_f32 SET STORAGE EXTERNAL,"
                # Migration 1's unnamed check on the key and the float64 blob.
                " DROP CONSTRAINT {old},"
                " ADD CONSTRAINT {new} CHECK ("
                "(embedding_key IS NULL) = (embedding_f64 IS NULL AND embedding_f32 IS NULL)"
                " AND (embedding_f64 IS NULL OR embedding_f32 IS NULL)"
                " AND (embedding_f64 IS NULL OR octet_length(embedding_f64) = {n64})"
                " AND (embedding_f32 IS NULL OR octet_length(embedding_f32) = {n32}))"
            ).format(
                t=qualified(schema, CHUNKS),
                old=sql.Identifier(f"{CHUNKS}_check"),
                new=sql.Identifier(f"{CHUNKS}_blobs"),
                n64=sql.Literal(8 * dim),
                n32=sql.Literal(4 * dim),
            )
        )

    return alter


def _covering_index(
    schema: str, dim: int, include: tuple[str, ...], *, replace: bool = False
) -> Callable[[Cursor[Any]], None]:
    """Create :data:`COVERING_INDEX` carrying ``include`` (``replace``: dropping the one
    there first); nothing when ``dim`` is past :data:`COVERED_DIM_MAX`."""

    def create(cur: Cursor[Any]) -> None:
        if replace:
            cur.execute(
                sql.SQL("DROP INDEX IF EXISTS {s}.{i}").format(
                    s=sql.Identifier(schema), i=sql.Identifier(COVERING_INDEX)
                )
            )
        if dim > COVERED_DIM_MAX:
            return  # an entry could exceed a btree's limit: inserts would fail
        cur.execute(
            sql.SQL(
                "CREATE INDEX {i} ON {t} (tenant) INCLUDE ({include})"
                " WHERE tenant IS NOT NULL AND octet_length(tenant) <= {n}"
            ).format(
                i=sql.Identifier(COVERING_INDEX),
                t=qualified(schema, CHUNKS),
                include=sql.SQL(", ").join(map(sql.Identifier, include)),
                n=sql.Literal(COVERED_TENANT_BYTES),
            )
        )

    return create


def _v3(schema: str) -> Callable[[Cursor[Any]], None]:
    def create(cur: Cursor[Any]) -> None:
        t = qualified(schema, CHUNKS)
        cur.execute(
            sql.SQL("ALTER TABLE {t} ADD COLUMN record_bytes bigint NOT NULL DEFAULT 0").format(t=t)
        )
        select = sql.SQL(
            "SELECT chunk_id, record_json, embedding_key, embedding_f64 FROM {t}"
            " WHERE chunk_id > %s ORDER BY chunk_id LIMIT %s"
        ).format(t=t)
        update = sql.SQL(
            "UPDATE {t} AS c SET record_bytes = u.b FROM unnest(%s::text[], %s::bigint[])"
            " AS u(i, b) WHERE c.chunk_id = u.i"
        ).format(t=t)
        last = ""
        while True:
            rows = cur.execute(select, (last, _MIGRATE_BATCH), binary=True).fetchall()
            if not rows:
                break
            ids = [str(r[0]) for r in rows]
            sizes = [
                record_size(
                    StoredChunk(str(text), None if key is None else str(key), blob, 1).record()
                )
                for _i, text, key, blob in rows
            ]
            cur.execute(update, (ids, sizes))
            last = ids[-1]
        TABLES.usage_in(schema).create(cur)

    return create
