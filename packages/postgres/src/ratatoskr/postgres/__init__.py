"""The PostgreSQL machinery the ratatoskr planes share.

psycopg 3 with a ``psycopg_pool`` connection pool; a schema per store, its
migrations recorded in a version table and applied under an advisory lock; the
fixed settings (``embedding_dim``) recorded in the schema; typed, content-free
storage errors mapped from the driver's; the idempotency ledger (bifrost's
``Ledger`` inside a transaction) and the write transaction every store's write
verb runs around its own SQL (``run_write``: bifrost's one write path); the scope
filter as SQL; bifrost's token cache shared by every provider process. The
stores themselves live in their planes (``ratatoskr.memory.postgres``,
``ratatoskr.affect.postgres``), as the SQLite ones do: this package knows no
plane.
"""

from ratatoskr.postgres.database import (
    Pool,
    PoolOptions,
    PostgresDatabase,
    on_table,
    open_pool,
    open_schema,
)
from ratatoskr.postgres.errors import translate_errors
from ratatoskr.postgres.extension import vector_extension
from ratatoskr.postgres.ledger import (
    PRUNE_PER_WRITE,
    LedgerEntry,
    LedgerTransaction,
    PostgresLedger,
)
from ratatoskr.postgres.migrations import MetaSetting, Migration, read_meta, schema_version
from ratatoskr.postgres.token_cache import PostgresTokenCache
from ratatoskr.postgres.writes import run_write
from ratatoskr.storage import errors as _storage_errors
from ratatoskr.storage.errors import *  # noqa: F403  (the storage errors, re-exported below)

__all__ = [
    "PRUNE_PER_WRITE",
    "LedgerEntry",
    "LedgerTransaction",
    "MetaSetting",
    "Migration",
    "Pool",
    "PoolOptions",
    "PostgresDatabase",
    "PostgresLedger",
    "PostgresTokenCache",
    "on_table",
    "open_pool",
    "open_schema",
    "read_meta",
    "run_write",
    "schema_version",
    "translate_errors",
    "vector_extension",
]
__all__ += _storage_errors.__all__
