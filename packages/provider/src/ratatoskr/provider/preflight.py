"""Opening the planes a provider serves: preflight checks, then the stores.

Everything that can be checked without writing is checked first, for every
plane, before any database is opened — so a bad setting fails with one line
naming it and no database file is created or changed.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bifrost.auth import InMemoryTokenCache, TokenCache
from ratatoskr.provider.registry import Key, PlaneEntry, entry
from ratatoskr.provider.settings import ConfigError, Plane, Settings, is_dsn, redact_dsn
from ratatoskr.sqlite import (
    INTEGRITY_SKIPPED,
    MEMORY_PATH,
    SqliteTokenCache,
    StorageError,
    inspect_database,
    same_file,
    token_cache_path,
)
from ratatoskr.vmp import is_loopback_host

# psycopg is imported only where a DSN is opened or inspected (see registry.py).
if TYPE_CHECKING:
    from ratatoskr import postgres as pg


def fixed_keys(plane: Plane) -> list[str]:
    """The meta keys fixed in ``plane``'s file when it is created."""
    fixed = entry(plane).fixed
    return [fixed.key] if fixed else []


def db_setting(plane: Plane) -> str:
    """The environment variable of ``plane``'s database."""
    return entry(plane).db_setting


def pg_pool_options() -> pg.PoolOptions:
    """One pool per plane per process, shared by its store and its token cache; size
    processes x planes x max_size below the server's max_connections (100 by default)."""
    from ratatoskr.postgres import PoolOptions  # noqa: PLC0415 - psycopg only for a DSN

    return PoolOptions(min_size=1, max_size=4, connect_timeout=5)


@dataclass
class ServedPlane:
    """One open plane: its table entry, its store, what ``/readyz`` reads through it,
    and its token cache (a plane that takes Heimdall tokens)."""

    entry: PlaneEntry[Any]
    store: Any
    replay: TokenCache | None = None

    def read(self) -> object:
        """A read through the store (``/readyz``); raises whatever the store raises."""
        return self.entry.read(self.store)


@dataclass
class OpenPlanes:
    """The planes a provider serves, in the order they were opened."""

    served: dict[Plane, ServedPlane] = field(default_factory=dict)
    # Connection pools of the planes served from PostgreSQL (closed last).
    pools: list[pg.Pool] = field(default_factory=list)
    closed: bool = field(default=False, init=False)

    @property
    def stores(self) -> dict[Plane, Any]:
        """Each open plane's store."""
        return {name: plane.store for name, plane in self.served.items()}

    def close(self) -> None:
        """Close every open store and token cache, then the pools; idempotent."""
        if self.closed:
            return
        self.closed = True
        for plane in self.served.values():
            plane.store.close()
        for plane in self.served.values():
            close = getattr(plane.replay, "close", None)  # a file's or a schema's cache
            if callable(close):
                close()
        for pool in self.pools:
            pool.close()


def open_token_cache(db_path: str) -> TokenCache:
    """The token cache shared by every process serving the plane file ``db_path``
    (a file beside it, see ``ratatoskr.sqlite.token_cache``); an in-memory plane, which
    only one process can serve, keeps its own in memory."""
    if db_path == MEMORY_PATH:
        return InMemoryTokenCache()
    return SqliteTokenCache(token_cache_path(db_path))


# A start runs SQLite's integrity check on plane files up to this size (file and
# -wal): it reads every page, ~1 s per GB from the page cache and several times that
# from a cold disk (a 1M-chunk memory file took most of a 24 s start). Larger files
# start unchecked; ``doctor`` checks them whole, and SQLite refuses a damaged page
# whenever one is read.
START_CHECK_LIMIT = 512 * 1024 * 1024


def database_problems(
    settings: Settings, plane: Plane, *, check_limit: int | None = None
) -> list[str]:
    """Every problem with ``plane``'s existing database file, one line each naming the
    setting (``[]`` for a sound file or one not created yet). Read-only: the preflight
    refuses to start on the first (checking integrity up to ``check_limit`` bytes, see
    :data:`START_CHECK_LIMIT`), ``doctor`` lists them all. Raises nothing."""
    path = settings.db_path(plane)
    if path == MEMORY_PATH:
        return []
    if is_dsn(path):
        return inspect_postgres(settings, plane).problems
    path = os.path.abspath(path)  # messages name the file wherever the command ran
    plane_entry = entry(plane)
    setting = plane_entry.db_setting
    if os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
        return [f"{setting}: {path} is not readable and writable"]
    fixed = plane_entry.fixed
    try:
        report = inspect_database(
            path, plane=plane, keys=fixed_keys(plane), check_limit=check_limit
        )
    except StorageError as exc:
        return [f"{setting}: {path}: {exc.message}"]
    if not report.exists:
        return []
    problems = []
    siblings = [path, f"{path}-wal", f"{path}-shm"]
    if plane_entry.takes_tokens:
        siblings.append(token_cache_path(path))
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
        stored = report.meta.get(fixed.key)
        wanted = fixed.wanted(settings)
        if stored is not None and stored != wanted:
            problems.append(
                f"{fixed.variable}={wanted}, but {path} was created with {fixed.key}={stored}"
            )
    if report.integrity not in ("ok", INTEGRITY_SKIPPED):
        problems.append(f"{setting}: {path} fails SQLite's integrity check")
    if plane_entry.takes_tokens:
        replay = token_cache_path(path)
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
    dsn, plane_entry = settings.db_path(plane), entry(plane)
    setting, shown = plane_entry.db_setting, redact_dsn(dsn)
    report = PostgresReport()
    if plane_entry.postgres is None:  # the settings refuse such a DSN already
        report.problems.append(f"{setting}: {plane_entry.dsn_refused}")
        return report
    schema, fixed = plane_entry.postgres.schema, plane_entry.fixed

    from ratatoskr import postgres as pg  # noqa: PLC0415 - psycopg only for a DSN

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
        ours = (plane, pg.token_cache.JTI_CACHE_PLANE)
        foreign = [p for p in pg.migrations.recorded_planes(cur, schema) if p not in ours]
        if foreign:
            report.problems.append(
                f"{setting}: schema {schema} holds the {foreign[0]} plane's data"
            )
        if fixed and (stored := pg.read_meta(cur, schema, fixed.key)) is not None:
            report.meta[fixed.key] = stored
            if stored != (wanted := fixed.wanted(settings)):
                report.problems.append(
                    f"{fixed.variable}={wanted}, but schema {schema} at {shown} was created "
                    f"with {fixed.key}={stored}"
                )

    try:
        pool = pg.open_pool(dsn, pg.PoolOptions(min_size=1, max_size=1, connect_timeout=5))
    except StorageError as exc:
        report.problems.append(f"{setting}: {shown}: {exc.message}")
        return report
    except Exception as exc:  # a malformed DSN: the driver's message may quote it
        report.problems.append(f"{setting}: {shown}: cannot connect ({type(exc).__name__})")
        return report
    try:
        with pool.connection() as conn, conn.cursor() as cur:
            look(cur)
    except Exception as exc:  # the driver's messages may quote the DSN
        message = exc.message if isinstance(exc, StorageError) else type(exc).__name__
        report.problems.append(f"{setting}: {shown}: {message}")
    finally:
        pool.close()
    return report


def key_problem(settings: Settings, key: Key) -> str | None:
    """What is wrong with ``key`` under ``settings``, one line naming the setting, or None.
    Raises nothing."""
    if key is Key.HEIMDALL:
        try:
            settings.heimdall_key_bytes()
        except ConfigError as exc:
            return str(exc)
        return None
    if settings.vmp_api_key is None and not is_loopback_host(settings.host):
        return "RATATOSKR_VMP_API_KEY: required when RATATOSKR_HOST is not a loopback address"
    return None


def keys_of(planes: tuple[Plane, ...]) -> list[Key]:
    """The keys guarding ``planes``, each once, in ``Key``'s order."""
    wanted = {entry(plane).key for plane in planes}
    return [key for key in Key if key in wanted]


def validate_layout(settings: Settings, planes: tuple[Plane, ...]) -> None:
    """Checks that need the filesystem, run before any database is opened.

    Raises ConfigError: two planes on one file, or a database directory missing.
    """
    files = [p for p in planes if not is_dsn(settings.db_path(p))]
    for i, a in enumerate(files):
        for b in files[i + 1 :]:
            if same_file(settings.db_path(a), settings.db_path(b)):
                raise ConfigError(
                    f"{entry(a).db_setting} and {entry(b).db_setting} name the same "
                    "file; each plane needs its own database file"
                )
    for plane in files:
        path = settings.db_path(plane)
        if path != ":memory:" and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise ConfigError(f"{entry(plane).db_setting}: directory of {path} does not exist")


def preflight(settings: Settings, planes: tuple[Plane, ...]) -> None:
    """Every check that needs no write. Raises ConfigError naming the setting."""
    validate_layout(settings, planes)
    for key in keys_of(planes):
        problem = key_problem(settings, key)
        if problem is not None:
            raise ConfigError(problem)
    for plane in planes:
        problems = database_problems(settings, plane, check_limit=START_CHECK_LIMIT)
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
            opened.served[plane] = _open(settings, entry(plane), opened)
    except StorageError as exc:  # either backend's: one hierarchy (ratatoskr.storage)
        opened.close()
        raise ConfigError(f"{db_setting(plane)}: {exc.message}") from None
    except BaseException:
        opened.close()
        raise
    return opened


def _open(settings: Settings, plane: PlaneEntry[Any], opened: OpenPlanes) -> ServedPlane:
    """Open ``plane``'s store (and its token cache when it takes tokens): from a
    PostgreSQL DSN on one new pool per process (each worker opens its own, after
    the fork) shared by the store and the cache, else from its file."""
    path = settings.db_path(plane.name)
    token_cache: Callable[[], TokenCache]
    if is_dsn(path):
        if plane.postgres is None:  # the settings refuse such a DSN already
            raise ConfigError(f"{plane.db_setting}: {plane.dsn_refused}")
        from ratatoskr import postgres as pg  # noqa: PLC0415 - psycopg only for a DSN

        pool = pg.open_pool(path, pg_pool_options())
        opened.pools.append(pool)
        schema = plane.postgres.schema
        store = plane.postgres.open(pool, schema, settings)
        token_cache = functools.partial(pg.PostgresTokenCache, pool, schema=schema)
    else:
        store = plane.open_file(path, settings)
        token_cache = functools.partial(open_token_cache, path)
    try:
        return ServedPlane(plane, store, token_cache() if plane.takes_tokens else None)
    except BaseException:
        store.close()
        raise
