"""Append-only schema migrations recorded in a version table, applied at open.

Each plane owns a list of migrations; ``apply_migrations`` applies the ones the
file has not seen yet inside the caller's write transaction, so a failed
migration leaves the file as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import apsw

from ratatoskr.sqlite.errors import ForeignDatabase, SchemaMismatch, SchemaTooNew

VERSION_TABLE = "ratatoskr_schema"
META_TABLE = "ratatoskr_meta"

_BOOTSTRAP = f"""
CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (
    plane TEXT NOT NULL,
    version INTEGER NOT NULL,
    name TEXT NOT NULL,
    applied_at TEXT NOT NULL,
    PRIMARY KEY (plane, version)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS {META_TABLE} (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
"""


@dataclass(frozen=True)
class Migration:
    """One schema step: ``sql`` is a script or a callable given the connection."""

    version: int
    name: str
    sql: str | Callable[[apsw.Connection], None]


def _check_sequence(migrations: Sequence[Migration]) -> None:
    versions = [m.version for m in migrations]
    if versions != list(range(1, len(versions) + 1)):
        raise ValueError("migrations must be numbered 1, 2, 3, … without gaps")


def recorded_planes(conn: apsw.Connection) -> tuple[str, ...]:
    """Every plane whose migrations ``conn``'s file records, sorted."""
    if not conn.table_exists(None, VERSION_TABLE):
        return ()
    rows = conn.execute(f"SELECT DISTINCT plane FROM {VERSION_TABLE} ORDER BY plane").fetchall()
    return tuple(str(r[0]) for r in rows)


def schema_version(conn: apsw.Connection, plane: str) -> int:
    """The highest migration applied for ``plane`` (0 for a fresh file)."""
    if not conn.table_exists(None, VERSION_TABLE):
        return 0
    row = conn.execute(
        f"SELECT COALESCE(MAX(version), 0) FROM {VERSION_TABLE} WHERE plane = ?", (plane,)
    ).fetchall()
    return int(row[0][0])  # type: ignore[arg-type]


def pending(conn: apsw.Connection, plane: str, migrations: Sequence[Migration]) -> bool:
    """Whether ``migrations`` hold a step this file has not applied (read-only check)."""
    return schema_version(conn, plane) < len(migrations)


def apply_migrations(conn: apsw.Connection, plane: str, migrations: Sequence[Migration]) -> int:
    """Apply the missing migrations of ``plane``; return the resulting version.

    Must run inside a write transaction. Raises SchemaTooNew when the file is ahead.
    """
    _check_sequence(migrations)
    others = [p for p in recorded_planes(conn) if p != plane]
    if others:
        raise ForeignDatabase(f"the file holds the {others[0]} plane, not {plane}")
    conn.execute(_BOOTSTRAP)
    current = schema_version(conn, plane)
    if current > len(migrations):
        raise SchemaTooNew(
            f"{plane} schema version {current} is newer than this release knows ({len(migrations)})"
        )
    now = datetime.now(UTC).isoformat(timespec="seconds")
    for migration in migrations[current:]:
        if callable(migration.sql):
            migration.sql(conn)
        else:
            conn.execute(migration.sql)
        conn.execute(
            f"INSERT INTO {VERSION_TABLE} (plane, version, name, applied_at) VALUES (?, ?, ?, ?)",
            (plane, migration.version, migration.name, now),
        )
    return len(migrations)


def read_meta(conn: apsw.Connection, key: str) -> str | None:
    """A setting the file was created with, or None."""
    if not conn.table_exists(None, META_TABLE):
        return None
    rows = conn.execute(f"SELECT value FROM {META_TABLE} WHERE key = ?", (key,)).fetchall()
    return None if not rows else str(rows[0][0])


def ensure_meta(conn: apsw.Connection, key: str, value: str, *, setting: str) -> None:
    """Record ``key=value`` on first open; afterwards refuse a different value.

    Raises SchemaMismatch naming both values (``setting`` is the user-facing name).
    """
    stored = read_meta(conn, key)
    if stored is None:
        conn.execute(f"INSERT INTO {META_TABLE} (key, value) VALUES (?, ?)", (key, value))
    elif stored != value:
        raise SchemaMismatch(setting, stored, value)
