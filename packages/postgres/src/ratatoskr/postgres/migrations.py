"""Append-only schema migrations recorded in a version table, applied under an advisory lock.

Every store lives in a schema of its own. The schema's ``ratatoskr_schema``
table records the migrations applied per plane, and ``ratatoskr_meta`` the
fixed settings the schema was created with (``embedding_dim``). Any number of
provider processes may open the same schema at once: the one that finds work
to do takes a transaction-scoped advisory lock, re-reads the version under it
and applies what is still missing, all in one transaction. The others wait on
the lock and then find nothing to do. A failed migration rolls back whole.

A schema holds one data plane (memory or affect); the replay cache
(``replay``) may sit beside any of them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import Cursor, sql
from psycopg.sql import Composed

from ratatoskr.storage.errors import ForeignDatabase, SchemaMismatch, SchemaTooNew

__all__ = [
    "COMPANION_PLANES",
    "MIGRATION_LOCK",
    "MetaSetting",
    "Migration",
    "apply_migrations",
    "check_schema_name",
    "needs_migration",
    "qualified",
    "read_meta",
    "schema_version",
]

VERSION_TABLE = "ratatoskr_schema"
META_TABLE = "ratatoskr_meta"
# One key for every ratatoskr migration on a server: migrations are rare, and one
# key also serialises ``CREATE EXTENSION vector`` between stores of different schemas
# (two concurrent creations of one extension fail with a unique violation).
MIGRATION_LOCK = 0x7261_7461_746F_736B  # "ratatosk"
COMPANION_PLANES = frozenset({"replay"})
# Lower-case identifiers only: no quoting surprises in psql, and a name that fits
# PostgreSQL's 63-byte limit with room for the table-name suffixes of indexes.
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,47}$")


def check_schema_name(schema: str) -> str:
    """``schema`` if it is a plain lower-case identifier of at most 48 characters,
    else ValueError."""
    if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
        raise ValueError("schema must be a lower-case identifier of at most 48 characters")
    return schema


@dataclass(frozen=True)
class Migration:
    """One schema step: ``sql`` is composed SQL (naming its schema; several statements
    allowed) or a callable given the cursor of the migration's transaction."""

    version: int
    name: str
    sql: Composed | Callable[[Cursor[Any]], None]


@dataclass(frozen=True)
class MetaSetting:
    """A fixed setting: the stored value and the user-facing name used in errors."""

    value: str
    setting: str


def _check_sequence(migrations: Sequence[Migration]) -> None:
    versions = [m.version for m in migrations]
    if versions != list(range(1, len(versions) + 1)):
        raise ValueError("migrations must be numbered 1, 2, 3, … without gaps")


def qualified(schema: str, name: str) -> sql.Composed:
    """``"schema"."name"`` for composing SQL (identifiers quoted by psycopg)."""
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(name))


def _has_table(cur: Cursor[Any], schema: str, name: str) -> bool:
    cur.execute("SELECT to_regclass(%s) IS NOT NULL", (f'"{schema}"."{name}"',))
    row = cur.fetchone()
    return bool(row and row[0])


def recorded_planes(cur: Cursor[Any], schema: str) -> tuple[str, ...]:
    """Every plane whose migrations the schema records, sorted."""
    if not _has_table(cur, schema, VERSION_TABLE):
        return ()
    cur.execute(
        sql.SQL("SELECT DISTINCT plane FROM {} ORDER BY plane").format(
            qualified(schema, VERSION_TABLE)
        )
    )
    return tuple(str(r[0]) for r in cur.fetchall())


def schema_version(cur: Cursor[Any], schema: str, plane: str) -> int:
    """The highest migration applied for ``plane`` in ``schema`` (0 when none)."""
    if not _has_table(cur, schema, VERSION_TABLE):
        return 0
    cur.execute(
        sql.SQL("SELECT COALESCE(MAX(version), 0) FROM {} WHERE plane = %s").format(
            qualified(schema, VERSION_TABLE)
        ),
        (plane,),
    )
    row = cur.fetchone()
    return int(row[0]) if row else 0


def read_meta(cur: Cursor[Any], schema: str, key: str) -> str | None:
    """A setting the schema was created with, or None."""
    if not _has_table(cur, schema, META_TABLE):
        return None
    cur.execute(
        sql.SQL("SELECT value FROM {} WHERE key = %s").format(qualified(schema, META_TABLE)), (key,)
    )
    row = cur.fetchone()
    return None if row is None else str(row[0])


def _check_owner(cur: Cursor[Any], schema: str, plane: str) -> None:
    others = set(recorded_planes(cur, schema)) - {plane}
    if plane not in COMPANION_PLANES:
        others -= COMPANION_PLANES
        if others:
            raise ForeignDatabase(f"the schema holds the {sorted(others)[0]} plane, not {plane}")


def _check_meta(cur: Cursor[Any], schema: str, meta: Mapping[str, MetaSetting]) -> list[str]:
    """Raise SchemaMismatch for a stored value that differs; return the keys not stored."""
    missing: list[str] = []
    for key, want in meta.items():
        stored = read_meta(cur, schema, key)
        if stored is None:
            missing.append(key)
        elif stored != want.value:
            raise SchemaMismatch(want.setting, stored, want.value)
    return missing


def needs_migration(
    cur: Cursor[Any],
    schema: str,
    plane: str,
    migrations: Sequence[Migration],
    meta: Mapping[str, MetaSetting],
) -> bool:
    """Whether :func:`apply_migrations` has anything to do (a read-only check, no lock).

    Raises the errors :func:`apply_migrations` would raise for a schema that is
    already complete (ForeignDatabase, SchemaTooNew, SchemaMismatch).
    """
    current = _known_version(cur, schema, plane, migrations)
    missing = _check_meta(cur, schema, meta)
    return current < len(migrations) or bool(missing)


def _known_version(
    cur: Cursor[Any], schema: str, plane: str, migrations: Sequence[Migration]
) -> int:
    """The schema's version of ``plane``, once it is known to be ``plane``'s and no newer
    than ``migrations``; ForeignDatabase, SchemaTooNew otherwise."""
    _check_owner(cur, schema, plane)
    current = schema_version(cur, schema, plane)
    if current > len(migrations):
        raise SchemaTooNew(
            f"{plane} schema version {current} is newer than this release knows ({len(migrations)})"
        )
    return current


def apply_migrations(
    cur: Cursor[Any],
    schema: str,
    plane: str,
    migrations: Sequence[Migration],
    meta: Mapping[str, MetaSetting],
) -> int:
    """Create ``schema`` if needed and apply the missing migrations of ``plane``; record
    ``meta`` on first use and refuse a different value afterwards. Returns the version.

    Must run inside a transaction (the caller commits): takes the advisory lock
    first. Raises ForeignDatabase, SchemaTooNew, SchemaMismatch (naming both
    values; the transaction must then be rolled back, leaving the schema as it was).
    """
    _check_sequence(migrations)
    cur.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
    cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
    if cur.fetchone() is None:
        # Checked first: CREATE SCHEMA IF NOT EXISTS demands the CREATE privilege on the
        # database even when the schema exists (an operator may have made it for us).
        cur.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    cur.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} ("
            " plane text NOT NULL, version integer NOT NULL, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (plane, version))"
        ).format(qualified(schema, VERSION_TABLE))
    )
    cur.execute(
        sql.SQL("CREATE TABLE IF NOT EXISTS {} (key text PRIMARY KEY, value text NOT NULL)").format(
            qualified(schema, META_TABLE)
        )
    )
    current = _known_version(cur, schema, plane, migrations)
    # Before any migration runs, so a mismatch leaves nothing to roll back but the lock.
    missing = _check_meta(cur, schema, meta)
    for migration in migrations[current:]:
        if isinstance(migration.sql, Composed):
            cur.execute(migration.sql)
        else:
            migration.sql(cur)
        cur.execute(
            sql.SQL("INSERT INTO {} (plane, version, name) VALUES (%s, %s, %s)").format(
                qualified(schema, VERSION_TABLE)
            ),
            (plane, migration.version, migration.name),
        )
    for key in missing:
        cur.execute(
            sql.SQL("INSERT INTO {} (key, value) VALUES (%s, %s)").format(
                qualified(schema, META_TABLE)
            ),
            (key, meta[key].value),
        )
    return len(migrations)
