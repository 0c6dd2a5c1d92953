"""How much one database file holds: rows per table, ledger and tombstone counts, sizes.

Read-only and safe beside a serving provider: every count comes from one read
snapshot (WAL readers never block writers), nothing is written. Which tables
exist is read from the file (``PRAGMA table_list``), so every plane, and every
schema version of it, is described without a list kept here. Two kinds of table
are recognised by shape rather than by name: an idempotency ledger has exactly
the columns :class:`~ratatoskr.sqlite.ledger.IdempotencyLedger` creates (its
live and expired entries are counted apart), and a tombstone table is named
``*_tombstones``.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass, field

import apsw

from ratatoskr.sqlite.driver import translate_errors
from ratatoskr.sqlite.files import open_existing
from ratatoskr.sqlite.ledger import IdempotencyLedger
from ratatoskr.sqlite.migrations import recorded_planes, schema_version

__all__ = ["DatabaseStats", "TableStats", "database_stats"]

TOMBSTONE_SUFFIX = "_tombstones"


@dataclass(frozen=True)
class TableStats:
    name: str
    rows: int
    # "table", "virtual" (a sqlite-vec index), or "shadow" (a virtual table's own storage).
    kind: str = "table"


@dataclass
class DatabaseStats:
    """One file's figures; sizes in bytes (``exists`` False: the rest is zero)."""

    path: str
    exists: bool
    file_bytes: int = 0
    wal_bytes: int = 0
    page_size: int = 0
    page_count: int = 0
    freelist_pages: int = 0
    schema_version: int = 0
    planes: tuple[str, ...] = ()
    tables: list[TableStats] = field(default_factory=list)
    ledger_entries: int = 0
    ledger_expired: int = 0
    tombstones: int = 0

    @property
    def free_bytes(self) -> int:
        """Space in free pages (``freelist_count × page_size``): reused by later writes,
        returned to the filesystem only by a VACUUM."""
        return self.freelist_pages * self.page_size


def database_stats(path: str, *, plane: str, now: float | None = None) -> DatabaseStats:
    """The figures of the database file at ``path`` (never created if missing).

    Raises StorageUnavailable / StorageCorrupt (content-free) for unreadable files.
    """
    if not os.path.exists(path):
        return DatabaseStats(path=path, exists=False)
    stats = DatabaseStats(path=path, exists=True, file_bytes=os.path.getsize(path))
    now = time.time() if now is None else now
    conn = open_existing(path)
    try:
        with translate_errors():
            conn.execute("BEGIN")
            try:
                _fill(conn, stats, plane, now)
            finally:
                conn.execute("COMMIT")
    finally:
        conn.close()
    # After the read: a WAL that exists only while connections are open is measured as
    # the provider has it (our connection adds nothing to it).
    wal = f"{path}-wal"
    stats.wal_bytes = os.path.getsize(wal) if os.path.exists(wal) else 0
    return stats


def _fill(conn: apsw.Connection, stats: DatabaseStats, plane: str, now: float) -> None:
    stats.page_size = _pragma(conn, "page_size")
    stats.page_count = _pragma(conn, "page_count")
    stats.freelist_pages = _pragma(conn, "freelist_count")
    stats.planes = recorded_planes(conn)
    stats.schema_version = schema_version(conn, plane)
    ledger_columns = _ledger_columns()
    listed = conn.execute("SELECT name, type FROM pragma_table_list WHERE schema = 'main'")
    for name, kind in sorted((str(n), str(k)) for n, k in listed):
        if name.startswith("sqlite_") or kind not in ("table", "virtual", "shadow"):
            continue
        rows = _count(conn, f"SELECT count(*) FROM {_quote(name)}")
        stats.tables.append(TableStats(name, rows, kind))
        if _columns(conn, name) == ledger_columns:
            stats.ledger_entries += rows
            stats.ledger_expired += _count(
                conn, f"SELECT count(*) FROM {_quote(name)} WHERE expires_at <= ?", (now,)
            )
        if name.endswith(TOMBSTONE_SUFFIX):
            stats.tombstones += rows


@functools.cache
def _ledger_columns() -> tuple[str, ...]:
    """The columns of a ledger table, as ``IdempotencyLedger`` creates them."""
    conn = apsw.Connection(":memory:")
    try:
        conn.execute(IdempotencyLedger("ledger").create_sql())
        return _columns(conn, "ledger")
    finally:
        conn.close()


def _columns(conn: apsw.Connection, table: str) -> tuple[str, ...]:
    rows = conn.execute("SELECT name FROM pragma_table_info(?) ORDER BY cid", (table,))
    return tuple(str(r[0]) for r in rows)


def _pragma(conn: apsw.Connection, name: str) -> int:
    return int(conn.execute(f"PRAGMA {name}").fetchall()[0][0])  # type: ignore[arg-type]


def _count(conn: apsw.Connection, sql: str, params: tuple[object, ...] = ()) -> int:
    return int(conn.execute(sql, params).fetchall()[0][0])  # type: ignore[arg-type]


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
