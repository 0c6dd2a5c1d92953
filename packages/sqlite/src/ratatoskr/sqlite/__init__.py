"""The SQLite machinery every ratatoskr plane shares.

One driver (apsw, bundling SQLite with extension loading), sqlite-vec loading,
the house pragmas (WAL, busy timeout, synchronous=FULL), group commit of concurrent
writes, append-only migrations
with a version table, fixed per-file settings, the idempotency ledger, the
at-rest JSON codec and typed, content-free storage errors; and a file's operator
side: online backup, verified restore, in-use detection and statistics.
"""

from ratatoskr.sqlite import codec
from ratatoskr.sqlite.backup import (
    BackupResult,
    InvalidBackup,
    PlaneFile,
    RestoreResult,
    backup_database,
    restore_database,
    verify_plane_file,
)
from ratatoskr.sqlite.database import (
    INTEGRITY_SKIPPED,
    CompactReport,
    Database,
    DatabaseReport,
    MetaSetting,
    compact_database,
    inspect_database,
    same_file,
)
from ratatoskr.sqlite.driver import (
    MEMORY_PATH,
    ConnectionOptions,
    connect,
    driver_versions,
    load_sqlite_vec,
    sqlite_vec_version,
    translate_errors,
)
from ratatoskr.sqlite.group import Written
from ratatoskr.sqlite.inuse import DatabaseInUse, claim_databases, database_in_use
from ratatoskr.sqlite.ledger import IdempotencyLedger, LedgerEntry, LedgerTransaction
from ratatoskr.sqlite.migrations import Migration, read_meta, schema_version
from ratatoskr.sqlite.stats import DatabaseStats, TableStats, database_stats
from ratatoskr.sqlite.token_cache import SqliteTokenCache, token_cache_path
from ratatoskr.storage import errors as _storage_errors
from ratatoskr.storage.errors import *  # noqa: F403  (the storage errors, re-exported below)

__all__ = [
    "INTEGRITY_SKIPPED",
    "MEMORY_PATH",
    "BackupResult",
    "CompactReport",
    "ConnectionOptions",
    "Database",
    "DatabaseInUse",
    "DatabaseReport",
    "DatabaseStats",
    "IdempotencyLedger",
    "InvalidBackup",
    "LedgerEntry",
    "LedgerTransaction",
    "MetaSetting",
    "Migration",
    "PlaneFile",
    "RestoreResult",
    "SqliteTokenCache",
    "TableStats",
    "Written",
    "backup_database",
    "claim_databases",
    "codec",
    "compact_database",
    "connect",
    "database_in_use",
    "database_stats",
    "driver_versions",
    "inspect_database",
    "load_sqlite_vec",
    "read_meta",
    "restore_database",
    "same_file",
    "schema_version",
    "sqlite_vec_version",
    "token_cache_path",
    "translate_errors",
    "verify_plane_file",
]
__all__ += _storage_errors.__all__
