"""The PostgreSQL machinery the ratatoskr planes share.

psycopg 3 with a ``psycopg_pool`` connection pool; a schema per store, its
migrations recorded in a version table and applied under an advisory lock; the
fixed settings (``embedding_dim``) recorded in the schema; typed, content-free
storage errors mapped from the driver's; the idempotency ledger; bifrost's
replay cache shared by every provider process. The stores themselves live in
their planes (``ratatoskr.memory.postgres``, ``ratatoskr.affect.postgres``), as
the SQLite ones do: this package knows no plane.
"""

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
from ratatoskr.postgres.migrations import MetaSetting, Migration, read_meta, schema_version
from ratatoskr.postgres.replay import PostgresReplayCache

__all__ = [
    "ForeignDatabase",
    "LedgerEntry",
    "MetaSetting",
    "Migration",
    "Pool",
    "PoolOptions",
    "PostgresDatabase",
    "PostgresLedger",
    "PostgresReplayCache",
    "SchemaMismatch",
    "SchemaTooNew",
    "StorageCorrupt",
    "StorageError",
    "StorageFull",
    "StorageReadOnly",
    "StorageUnavailable",
    "open_pool",
    "read_meta",
    "schema_version",
    "translate_errors",
    "vector_extension",
]
