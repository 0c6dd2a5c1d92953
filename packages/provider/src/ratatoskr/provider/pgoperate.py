"""``stats`` and ``compact`` of a plane served from PostgreSQL.

What each means there:

- ``stats``: the plane's schema version and, per table of its schema (``ratatoskr_memory``,
  ``ratatoskr_affect``), the exact row count (``count(*)``) and the space the table
  takes with its indexes and TOAST (``pg_total_relation_size``), read from the catalog.
- ``compact``: ``VACUUM (ANALYZE)`` of every table of the plane's schema: it makes dead
  rows' space reusable and refreshes the planner's statistics; it never takes a lock
  that stops readers or writers, so it runs beside a serving provider. It does not
  shrink files (that is ``VACUUM FULL``, which locks each table; run it yourself in a
  maintenance window if you need the disk back).

Read-only but for the ``VACUUM``; the DSN is shown with its password redacted, and a
driver message (which may quote the DSN) is never shown.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from psycopg import errors, sql

from ratatoskr import postgres as pg
from ratatoskr.provider.registry import entry
from ratatoskr.provider.settings import ConfigError, Plane, Settings, redact_dsn

__all__ = ["PgCompactReport", "PgTable", "pg_compact", "pg_stats"]

_ONE = pg.PoolOptions(min_size=1, max_size=1, connect_timeout=5)


@dataclass(frozen=True)
class PgTable:
    """One table of a plane's schema: exact rows, bytes with its indexes and TOAST."""

    name: str
    rows: int
    total_bytes: int


@dataclass
class PgCompactReport:
    """What ``VACUUM (ANALYZE)`` of a plane's schema did."""

    schema: str
    tables: int
    bytes_before: int
    bytes_after: int
    seconds: float


@dataclass
class _Look:
    schema: str
    schema_version: int = 0
    tables: list[PgTable] = field(default_factory=list)


def _schema(plane: Plane) -> str:
    described = entry(plane).postgres
    if described is None:  # the settings refuse such a DSN already
        raise ConfigError(f"{entry(plane).db_setting}: {entry(plane).dsn_refused}")
    return described.schema


def _tables(cur: Any, schema: str) -> list[tuple[str, int]]:
    cur.execute(
        "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') ORDER BY c.relname",
        (schema,),
    )
    return [(str(name), int(size)) for name, size in cur.fetchall()]


def _run(settings: Settings, plane: Plane, work: Any, *, autocommit: bool = False) -> Any:
    """``work(cur)`` on one connection to ``plane``'s DSN; a failure is ConfigError naming
    the setting and the redacted DSN (the driver's own text may quote the password)."""
    dsn = settings.db_path(plane)
    setting, shown = entry(plane).db_setting, redact_dsn(dsn)
    try:
        pool = pg.open_pool(dsn, _ONE)
    except pg.StorageError as exc:
        raise ConfigError(f"{setting}: {shown}: {exc.message}") from None
    except Exception as exc:  # a malformed DSN: the driver's message may quote it
        raise ConfigError(f"{setting}: {shown}: cannot connect ({type(exc).__name__})") from None
    try:
        with pool.connection() as conn:
            conn.autocommit = autocommit
            with conn.cursor() as cur:
                return work(cur)
    except ConfigError:
        raise
    except Exception as exc:
        message = exc.message if isinstance(exc, pg.StorageError) else type(exc).__name__
        raise ConfigError(f"{setting}: {shown}: {message}") from None
    finally:
        pool.close()


def pg_stats(settings: Settings, plane: Plane) -> dict[str, Any]:
    """``stats`` of ``plane``'s schema as a JSON-ready dict (``exists`` false before the
    first start created the schema). Raises ConfigError when the server cannot be read."""
    schema = _schema(plane)

    def look(cur: Any) -> _Look:
        found = _Look(schema)
        found.schema_version = pg.schema_version(cur, schema, plane)
        for name, size in _tables(cur, schema):
            cur.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, name)))
            row = cur.fetchone()
            found.tables.append(PgTable(name, int(row[0]) if row else 0, size))
        return found

    found: _Look = _run(settings, plane, look)
    return {
        "path": redact_dsn(settings.db_path(plane)),
        "postgresql": True,
        "schema": schema,
        "exists": bool(found.tables),
        "schema_version": found.schema_version,
        "total_bytes": sum(t.total_bytes for t in found.tables),
        "tables": {
            t.name: {"rows": t.rows, "kind": "table", "total_bytes": t.total_bytes}
            for t in found.tables
        },
    }


def pg_compact(settings: Settings, plane: Plane) -> PgCompactReport:
    """``VACUUM (ANALYZE)`` of every table of ``plane``'s schema. Raises ConfigError when
    the schema does not exist yet or the server cannot be reached."""
    schema = _schema(plane)

    def vacuum(cur: Any) -> PgCompactReport:
        start = time.perf_counter()
        before = _tables(cur, schema)
        if not before:
            raise ConfigError(
                f"{entry(plane).db_setting}: schema {schema} does not exist yet "
                "(created at the provider's first start); nothing to compact"
            )
        for name, _ in before:
            cur.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(schema, name)))
        after = _tables(cur, schema)
        return PgCompactReport(
            schema,
            len(before),
            sum(size for _, size in before),
            sum(size for _, size in after),
            time.perf_counter() - start,
        )

    report: PgCompactReport = _run(settings, plane, vacuum, autocommit=True)
    return report


def pg_vacuum_full(settings: Settings, plane: Plane) -> list[str]:
    """``VACUUM FULL`` of every table of ``plane``'s schema (``forget --vacuum-full``):
    each table rewritten into new files and the old ones removed, so dead rows'
    bytes leave the table files (each table is locked while it is rewritten).

    The planner's statistics hold values sampled from the rows (most common values,
    histogram bounds: ids, scope values, records, indexed fields) in ``pg_statistic``,
    in the same database's files, whenever ``ANALYZE`` (autovacuum's included) ran, and
    ``ANALYZE`` of a table left empty keeps its old statistics. So, for a superuser,
    the statistics of the schema's tables and indexes are deleted, the tables analysed
    again and ``pg_statistic`` rewritten without the deleted rows (waiting at most
    :data:`STATISTICS_LOCK_TIMEOUT` for its lock: every query planned in the database
    reads that catalog).

    Returns what stays in the server's files, one line each (empty: nothing): the
    statistics (another role cannot change that catalog, or it was busy), rows a
    session's older snapshot can still see (a VACUUM keeps them), tables this role may
    not rewrite (checked first: PostgreSQL would skip them with a warning). Raises
    ConfigError when the server cannot be reached."""
    schema = _schema(plane)

    def vacuum(cur: Any) -> list[str]:
        superuser = _is_superuser(cur)
        if not superuser and _not_maintainable(cur, schema):
            return [TABLES_KEPT]
        stays = [SNAPSHOT_KEPT] if _older_snapshots(cur) else []
        tables = [sql.Identifier(schema, name) for name, _ in _tables(cur, schema)]
        for table in tables:
            cur.execute(sql.SQL("VACUUM FULL {}").format(table))
        if superuser:
            cur.execute(
                "DELETE FROM pg_catalog.pg_statistic WHERE starelid IN (SELECT c.oid "
                "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = %s)",
                (schema,),
            )
        for table in tables:
            cur.execute(sql.SQL("ANALYZE {}").format(table))
        if not superuser:
            return [*stays, STATISTICS_KEPT]
        cur.execute(f"SET lock_timeout = '{STATISTICS_LOCK_TIMEOUT}'")
        try:
            cur.execute("VACUUM FULL pg_catalog.pg_statistic")
        except errors.LockNotAvailable:
            stays.append(STATISTICS_BUSY)
        finally:
            cur.execute("RESET lock_timeout")
        return stays

    return list(_run(settings, plane, vacuum, autocommit=True))


# What ``forget --vacuum-full`` says stays in the server's files (never a value or a name).
STATISTICS_LOCK_TIMEOUT = "5s"
TABLES_KEPT = (
    "the tables were not rewritten: this role may not VACUUM them (it must own them, or "
    "hold MAINTAIN on them); the erased rows stay as dead tuples until a VACUUM FULL"
)
SNAPSHOT_KEPT = (
    "another session held a snapshot older than the erasure: the rows it can still see "
    "stay in the files; run forget --vacuum-full again once it ends"
)
STATISTICS_KEPT = (
    "the planner's statistics (pg_statistic) were not cleared: that takes a superuser; "
    "values ANALYZE sampled from erased rows may stay in the server's files"
)
STATISTICS_BUSY = (
    "the planner's statistics (pg_statistic) were busy (another session held them for "
    f"over {STATISTICS_LOCK_TIMEOUT}) and were not rewritten; run forget --vacuum-full again"
)


def _not_maintainable(cur: Any, schema: str) -> bool:
    """Whether a table of ``schema`` may not be VACUUMed by this role, a superuser's
    checked before (not its owner's member, no MAINTAIN on PostgreSQL 17+)."""
    cur.execute("SELECT current_setting('server_version_num')::int")
    row = cur.fetchone()
    maintain = " OR has_table_privilege(c.oid, 'MAINTAIN')" if row and row[0] >= 170000 else ""
    cur.execute(
        "SELECT count(*) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
        "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'p') "
        f"AND NOT (pg_has_role(c.relowner, 'USAGE'){maintain})",
        (schema,),
    )
    found = cur.fetchone()
    return bool(found and found[0])


def _older_snapshots(cur: Any) -> bool:
    """Whether another session of this database holds a snapshot (its rows stay)."""
    cur.execute(
        "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND backend_xmin IS NOT NULL"
    )
    found = cur.fetchone()
    return bool(found and found[0])


def _is_superuser(cur: Any) -> bool:
    cur.execute("SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user")
    row = cur.fetchone()
    return bool(row and row[0])
