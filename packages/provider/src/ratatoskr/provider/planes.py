"""Opening the planes a provider serves: preflight checks, then the stores.

Everything that can be checked without writing is checked first, for every
plane, before any database is opened — so a bad setting fails with one line
naming it and no database file is created or changed.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import Any

from bifrost.auth import InMemoryReplayCache, ReplayCache
from ratatoskr import postgres as pg
from ratatoskr.affect import RatatoskrAffectStore, open_affect_store
from ratatoskr.affect.postgres import PostgresAffectStore, open_postgres_affect_store
from ratatoskr.memory import RatatoskrMemoryStore, open_memory_store
from ratatoskr.memory.postgres import PostgresMemoryStore, open_postgres_memory_store
from ratatoskr.postgres.migrations import recorded_planes
from ratatoskr.postgres.replay import REPLAY_PLANE
from ratatoskr.provider.settings import (
    ConfigError,
    Plane,
    Settings,
    is_dsn,
    redact_dsn,
    validate_layout,
)
from ratatoskr.sqlite import (
    MEMORY_PATH,
    SchemaMismatch,
    SqliteReplayCache,
    StorageError,
    inspect_database,
    replay_path,
)
from ratatoskr.vmp import VmpStore, is_loopback_host, open_vmp_store

# The setting fixed in each plane's file when it is created: (meta key, value getter, env name).
_FIXED = {
    "memory": ("embedding_dim", "memory_embedding_dim", "RATATOSKR_MEMORY_EMBEDDING_DIM"),
    "vmp": ("dim", "vmp_dim", "RATATOSKR_VMP_DIM"),
}


def fixed_keys(plane: str) -> list[str]:
    """The meta keys fixed in ``plane``'s file when it is created."""
    fixed = _FIXED.get(plane)
    return [fixed[0]] if fixed else []


def db_setting(plane: str) -> str:
    return f"RATATOSKR_{plane.upper()}_DB"


# The planes whose calls carry a Heimdall token, so they need a replay cache.
TOKEN_PLANES: tuple[Plane, ...] = ("memory", "affect")

# The PostgreSQL schema of each plane served from a DSN (one database per deployment:
# two deployments on one server use two databases). The plane's replay cache lives
# in the same schema (table ``replay_jti``).
PG_SCHEMAS: dict[str, str] = {"memory": "ratatoskr_memory", "affect": "ratatoskr_affect"}
# One pool per plane per process, shared by its store and its replay cache; size
# processes x planes x max_size below the server's max_connections (100 by default).
PG_POOL = pg.PoolOptions(min_size=1, max_size=4, connect_timeout=5)

MemoryStore = RatatoskrMemoryStore | PostgresMemoryStore
AffectStore = RatatoskrAffectStore | PostgresAffectStore


@dataclass
class OpenPlanes:
    """The stores a provider serves (None for a plane it does not serve), and the
    replay cache of each plane that takes Heimdall tokens."""

    memory: MemoryStore | None = None
    affect: AffectStore | None = None
    vmp: VmpStore | None = None
    replay: dict[str, ReplayCache] = field(default_factory=dict)
    # Connection pools of the planes served from PostgreSQL (closed last).
    pools: list[pg.Pool] = field(default_factory=list)
    closed: bool = field(default=False, init=False)

    def close(self) -> None:
        """Close every open store and replay cache; idempotent."""
        if self.closed:
            return
        self.closed = True
        for store in (self.memory, self.affect, self.vmp):
            if store is not None:
                store.close()
        for cache in self.replay.values():
            if isinstance(cache, SqliteReplayCache | pg.PostgresReplayCache):
                cache.close()
        for pool in self.pools:
            pool.close()


def open_replay_cache(db_path: str) -> ReplayCache:
    """The replay cache shared by every process serving the plane file ``db_path``
    (a file beside it, see ``ratatoskr.sqlite.replay``); an in-memory plane, which
    only one process can serve, keeps its own in memory."""
    if db_path == MEMORY_PATH:
        return InMemoryReplayCache()
    return SqliteReplayCache(replay_path(db_path))


def database_problems(settings: Settings, plane: Plane) -> list[str]:
    """Every problem with ``plane``'s existing database file, one line each naming the
    setting (``[]`` for a sound file or one not created yet). Read-only: the preflight
    refuses to start on the first, ``doctor`` lists them all. Raises nothing."""
    path = settings.db_path(plane)
    if path == MEMORY_PATH:
        return []
    if is_dsn(path):
        return inspect_postgres(settings, plane).problems
    setting = db_setting(plane)
    if os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
        return [f"{setting}: {path} is not readable and writable"]
    fixed = _FIXED.get(plane)
    try:
        report = inspect_database(path, plane=plane, keys=fixed_keys(plane))
    except StorageError as exc:
        return [f"{setting}: {path}: {exc.message}"]
    if not report.exists:
        return []
    problems = []
    siblings = [path, f"{path}-wal", f"{path}-shm"]
    if plane in TOKEN_PLANES:
        siblings.append(replay_path(path))
    for name in siblings:
        if os.path.exists(name) and os.stat(name).st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            problems.append(
                f"{setting}: {name} is readable by group or others (it holds what agents "
                f"remember about people); run: chmod 600 {name}"
            )
    foreign = [p for p in report.planes if p != plane]
    if foreign:
        problems.append(
            f"{setting}: {path} holds the {foreign[0]} plane's data; each plane needs its own file"
        )
    if fixed:
        stored = report.meta.get(fixed[0])
        wanted = str(getattr(settings, fixed[1]))
        if stored is not None and stored != wanted:
            problems.append(f"{fixed[2]}={wanted}, but {path} was created with {fixed[0]}={stored}")
    if report.integrity != "ok":
        problems.append(f"{setting}: {path} fails SQLite's integrity check")
    if plane in TOKEN_PLANES:
        replay = replay_path(path)
        if os.path.exists(replay) and not os.access(replay, os.R_OK | os.W_OK):
            problems.append(f"{setting}: {replay} is not readable and writable")
    return problems


@dataclass
class PostgresReport:
    """What a read-only look at a plane's PostgreSQL schema found."""

    problems: list[str] = field(default_factory=list)
    server: str | None = None
    pgvector: str | None = None
    schema_version: int = 0
    meta: dict[str, str] = field(default_factory=dict)


def inspect_postgres(settings: Settings, plane: Plane) -> PostgresReport:
    """Read-only checks of ``plane``'s DSN: the server answers, pgvector is installed (or
    installable), the schema holds this plane only, and its fixed setting matches. The
    messages name the setting and the DSN with its password redacted. Raises nothing."""
    dsn = settings.db_path(plane)
    setting, shown, schema = db_setting(plane), redact_dsn(dsn), PG_SCHEMAS[plane]
    report = PostgresReport()
    fixed = _FIXED.get(plane)

    def look(cur: Any) -> None:
        cur.execute("SHOW server_version")
        row = cur.fetchone()
        report.server = str(row[0]) if row else None
        found = pg.vector_extension(cur)
        if found is not None:
            report.pgvector = found[1]
        else:
            cur.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
            if cur.fetchone() is None:
                report.problems.append(
                    f"{setting}: {shown}: the pgvector extension (vector) is not available "
                    "on the server"
                )
        report.schema_version = pg.schema_version(cur, schema, plane)
        foreign = [p for p in recorded_planes(cur, schema) if p not in (plane, REPLAY_PLANE)]
        if foreign:
            report.problems.append(
                f"{setting}: schema {schema} holds the {foreign[0]} plane's data"
            )
        if fixed:
            stored = pg.read_meta(cur, schema, fixed[0])
            if stored is not None:
                report.meta[fixed[0]] = stored
                wanted = str(getattr(settings, fixed[1]))
                if stored != wanted:
                    report.problems.append(
                        f"{fixed[2]}={wanted}, but schema {schema} at {shown} was created "
                        f"with {fixed[0]}={stored}"
                    )

    try:
        pool = pg.open_pool(dsn, pg.PoolOptions(min_size=1, max_size=1, connect_timeout=5))
    except pg.StorageError as exc:
        report.problems.append(f"{setting}: {shown}: {exc.message}")
        return report
    except Exception as exc:  # a malformed DSN: the driver's message may quote it
        report.problems.append(f"{setting}: {shown}: cannot connect ({type(exc).__name__})")
        return report
    try:
        with pool.connection() as conn, conn.cursor() as cur:
            look(cur)
    except Exception as exc:  # the driver's messages may quote the DSN
        message = exc.message if isinstance(exc, pg.StorageError) else type(exc).__name__
        report.problems.append(f"{setting}: {shown}: {message}")
    finally:
        pool.close()
    return report


def preflight(settings: Settings, planes: tuple[Plane, ...]) -> None:
    """Every check that needs no write. Raises ConfigError naming the setting."""
    validate_layout(settings, planes)
    if "memory" in planes or "affect" in planes:
        settings.heimdall_key_bytes()
    if "vmp" in planes and settings.vmp_api_key is None and not is_loopback_host(settings.host):
        raise ConfigError(
            "RATATOSKR_VMP_API_KEY: required when RATATOSKR_HOST is not a loopback address"
        )
    for plane in planes:
        problems = database_problems(settings, plane)
        if problems:
            raise ConfigError(problems[0])


def open_planes(settings: Settings, planes: tuple[Plane, ...]) -> OpenPlanes:
    """Preflight, then open each plane's store. On failure nothing stays open.

    Raises ConfigError with one line naming the setting at fault.
    """
    preflight(settings, planes)
    opened = OpenPlanes()
    try:
        for plane in planes:
            if is_dsn(settings.db_path(plane)):
                _open_postgres(settings, plane, opened)
                continue
            _open_one(settings, plane, opened)
            if plane in TOKEN_PLANES:
                opened.replay[plane] = open_replay_cache(settings.db_path(plane))
    except (SchemaMismatch, pg.SchemaMismatch) as exc:
        opened.close()
        raise ConfigError(f"{db_setting(plane)}: {exc.message}") from None
    except (StorageError, pg.StorageError) as exc:
        opened.close()
        raise ConfigError(f"{db_setting(plane)}: {exc.message}") from None
    except BaseException:
        opened.close()
        raise
    return opened


def _open_one(settings: Settings, plane: Plane, opened: OpenPlanes) -> Any:
    path = settings.db_path(plane)
    if plane == "memory":
        opened.memory = open_memory_store(
            path,
            embedding_dim=settings.memory_embedding_dim,
            max_batch=settings.max_batch,
            max_top_k=settings.max_top_k,
            max_scope_any=settings.max_scope_any,
        )
    elif plane == "affect":
        opened.affect = open_affect_store(
            path,
            max_batch=settings.max_batch,
            max_page=settings.max_page,
            max_scope_any=settings.max_scope_any,
        )
    else:
        opened.vmp = open_vmp_store(
            path, dim=settings.vmp_dim, max_records=settings.vmp_max_records
        )


def _open_postgres(settings: Settings, plane: Plane, opened: OpenPlanes) -> None:
    """Open ``plane``'s PostgreSQL store and replay cache on one new pool (one per
    process: each worker opens its own, after the fork)."""
    schema = PG_SCHEMAS[plane]
    pool = pg.open_pool(settings.db_path(plane), PG_POOL)
    opened.pools.append(pool)
    if plane == "memory":
        opened.memory = open_postgres_memory_store(
            pool,
            embedding_dim=settings.memory_embedding_dim,
            schema=schema,
            max_batch=settings.max_batch,
            max_top_k=settings.max_top_k,
            max_scope_any=settings.max_scope_any,
        )
    else:
        opened.affect = open_postgres_affect_store(
            pool,
            schema=schema,
            max_batch=settings.max_batch,
            max_page=settings.max_page,
            max_scope_any=settings.max_scope_any,
        )
    opened.replay[plane] = pg.PostgresReplayCache(pool, schema=schema)
