"""The PostgreSQL machinery the ratatoskr planes share, and (for now) the PostgreSQL stores.

psycopg 3 with a ``psycopg_pool`` connection pool; a schema per store, its
migrations recorded in a version table and applied under an advisory lock; the
fixed settings (``embedding_dim``) recorded in the schema; typed, content-free
storage errors mapped from the driver's; the idempotency ledger; bifrost's
replay cache shared by every provider process. ``memory_store`` and
``affect_store`` implement bifrost's store protocols on top (they move beside
the SQLite stores in a later refactor).
"""

from ratatoskr.postgres.affect_store import PostgresAffectStore, open_postgres_affect_store
from ratatoskr.postgres.database import (
    Pool,
    PoolOptions,
    PostgresDatabase,
    open_pool,
)
from ratatoskr.postgres.errors import (
    ForeignDatabase,
    SchemaMismatch,
    SchemaTooNew,
    StorageCorrupt,
    StorageError,
    StorageFull,
    StorageReadOnly,
    StorageUnavailable,
    translate_errors,
)
from ratatoskr.postgres.extension import vector_extension
from ratatoskr.postgres.ledger import LedgerEntry, PostgresLedger
from ratatoskr.postgres.memory_store import PostgresMemoryStore, open_postgres_memory_store
from ratatoskr.postgres.migrations import MetaSetting, Migration, read_meta, schema_version
from ratatoskr.postgres.replay import PostgresReplayCache

__all__ = [
    "ForeignDatabase",
    "LedgerEntry",
    "MetaSetting",
    "Migration",
    "Pool",
    "PoolOptions",
    "PostgresAffectStore",
    "PostgresDatabase",
    "PostgresLedger",
    "PostgresMemoryStore",
    "PostgresReplayCache",
    "SchemaMismatch",
    "SchemaTooNew",
    "StorageCorrupt",
    "StorageError",
    "StorageFull",
    "StorageReadOnly",
    "StorageUnavailable",
    "open_pool",
    "open_postgres_affect_store",
    "open_postgres_memory_store",
    "read_meta",
    "schema_version",
    "translate_errors",
    "vector_extension",
]
