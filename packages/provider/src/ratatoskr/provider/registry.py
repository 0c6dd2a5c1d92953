"""Every plane the provider serves, described once, as data: ``PLANE_TABLE``.

A ``PlaneEntry`` says everything the rest of the provider needs to know of a
plane: its database setting, the setting fixed in its file when it is created,
how its store opens (from a SQLite path and, when it supports one, from a
PostgreSQL pool in its schema), how its app is built, which key guards it (a
plane guarded by the Heimdall key takes tokens, so it has a token cache), how
many migrations this release applies to its file, how its file is compacted,
what ``/readyz`` reads through it and what ``/metrics`` counts in it. Settings,
preflight, ``doctor``, the app, ``--dev``, the operator commands, readiness,
metrics, logging and the command line read this table and nothing else, so
adding a plane adds one entry here (and the ``Settings`` fields it names).

This module knows the planes' packages and reads the settings through typed
accessors (``lambda s: s.memory_db``); of the provider's modules it imports only
``settings``, a leaf.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypedDict, TypeVar

from starlette.applications import Starlette

from bifrost.auth import TokenCache
from bifrost.consumer import AppHooks, BodyBudget
from bifrost.consumer.keyed import PlaneAppOptions, build_keyed_plane_app
from bifrost.fields import fields_setting
from bifrost.planes import AFFECT_PLANE, MEMORY_PLANE, PlaneSpec
from bifrost.quota import Quota, affect_quota, memory_quota
from ratatoskr.affect import SqliteAffectStore, open_affect_store
from ratatoskr.affect import schema as affect_schema
from ratatoskr.memory import SqliteMemoryStore, compact_memory_file, open_memory_store
from ratatoskr.memory import schema as memory_schema
from ratatoskr.memory.sidecar import SUFFIX as INDEX_SUFFIX
from ratatoskr.memory.sync import cache_verdict
from ratatoskr.provider.settings import VMP_DSN_REFUSED, Plane, Settings
from ratatoskr.sqlite import CompactReport, ConnectionOptions, compact_database
from ratatoskr.vmp import VmpStore, build_vmp_app, is_loopback_host, open_vmp_store
from ratatoskr.vmp import schema as vmp_schema

# The PostgreSQL backends (psycopg, its pool) are imported when a plane opens on
# PostgreSQL, not here: a provider on SQLite files never loads them (~0.14 s of CPU in
# every provider, worker and command-line process).
if TYPE_CHECKING:
    import apsw

    from ratatoskr import postgres as pg
    from ratatoskr.affect.postgres import PostgresAffectStore
    from ratatoskr.memory.postgres import PostgresMemoryStore

__all__ = [
    "PLANES",
    "PLANE_TABLE",
    "AppParts",
    "FixedSetting",
    "Key",
    "PlaneEntry",
    "PostgresBackend",
    "bifrost_plane_app",
    "entry",
]

S = TypeVar("S")


class Key(enum.Enum):
    """The key that guards a plane (the value is how ``doctor`` names it)."""

    HEIMDALL = "heimdall key"  # per-call JWTs: the plane takes tokens and has a token cache
    VMP = "vmp api key"  # a bearer key; may be unset on a loopback listener


@dataclass(frozen=True)
class FixedSetting:
    """A setting recorded in a plane's file (or schema) when it is created: a later
    different value is refused, by the preflight and by ``doctor``."""

    key: str  # the meta key in the file
    attribute: str  # the Settings field (its name, for the environment variable)
    value: Callable[[Settings], object]  # reads that field

    @property
    def variable(self) -> str:
        """The environment variable that sets it."""
        return f"RATATOSKR_{self.attribute.upper()}"

    def wanted(self, settings: Settings) -> str:
        """The value ``settings`` asks for, as the file records it."""
        return str(self.value(settings))


@dataclass(frozen=True)
class PostgresBackend(Generic[S]):
    """How a plane opens from a PostgreSQL pool: its fixed schema (its token cache
    lives there too) and the opener."""

    schema: str
    open: Callable[[pg.Pool, str, Settings], S]


@dataclass(frozen=True)
class AppParts:
    """What a plane's app is built from besides its store: the settings, the plane's
    token cache (token planes) and what every plane of the process shares."""

    settings: Settings
    token_cache: TokenCache | None
    hooks: AppHooks
    body_budget: BodyBudget
    heavy_calls: threading.Semaphore


@dataclass(frozen=True)
class PlaneEntry(Generic[S]):
    """One plane, as the provider serves it (see the module docstring)."""

    name: Plane
    db_field: str  # the name of the Settings field holding its database (Settings.db_path)
    key: Key
    open_file: Callable[[str, Settings], S]
    build_app: Callable[[S, AppParts], Starlette]
    newest_version: Callable[[Settings], int]  # migrations this release applies
    read: Callable[[S], object]  # what /readyz reads through the store
    fixed: FixedSetting | None = None
    postgres: PostgresBackend[S] | None = None
    dsn_refused: str = ""  # why a DSN is refused, when there is no PostgreSQL backend
    count: Callable[[S], int] | None = None  # rows /metrics reports (None: no cheap count)
    compact_file: Callable[[str, bool, bool], CompactReport] | None = None  # None: the plain one
    wire: PlaneSpec[Any] | None = None  # a Bifrost plane's entry in bifrost.planes; None: own wire
    backup_hint: str | None = None  # what to use instead of backup/restore (None: the file)
    beside: tuple[str, ...] = ()  # suffixes of the caches the store keeps beside its file
    # doctor's read-only look at those caches, given the open file: (fine, detail)
    probe: Callable[[apsw.Connection, Settings], tuple[bool, str]] | None = None

    @property
    def db_setting(self) -> str:
        """The environment variable of its database."""
        return f"RATATOSKR_{self.db_field.upper()}"

    @property
    def verbs(self) -> frozenset[str] | None:
        """The ``verb`` labels of a Bifrost plane's calls; None: its calls are labelled
        by route template (a plane with a wire of its own, as VMP)."""
        return None if self.wire is None else frozenset(self.wire.verb_names) | {"handshake"}

    @property
    def takes_tokens(self) -> bool:
        """Whether its calls carry Heimdall tokens (so it has a token cache)."""
        return self.key is Key.HEIMDALL

    def compact(self, path: str, *, full: bool, vectors: bool) -> CompactReport:
        """Give the free pages of its file at ``path`` back (``ratatoskr compact``)."""
        if self.compact_file is not None:
            return self.compact_file(path, full, vectors)
        return compact_database(path, plane=self.name, full=full)


def bifrost_plane_app(spec: PlaneSpec[Any]) -> Callable[[Any, AppParts], Starlette]:
    """A Bifrost plane's app from the settings (bifrost's ``build_keyed_plane_app`` for
    ``spec``): one mapping for every such plane."""

    def build(store: Any, parts: AppParts) -> Starlette:
        settings = parts.settings
        return build_keyed_plane_app(
            spec,
            store,
            settings.heimdall_key_bytes(),
            settings.consumer_id,
            options=PlaneAppOptions(
                issuer=settings.issuer,
                max_lifetime_s=settings.token_max_lifetime_s,
                leeway_s=settings.clock_skew_s,
                token_cache=parts.token_cache,
                previous_keys=settings.heimdall_previous_keys(),
                max_body_bytes=settings.max_body_bytes,
                max_json_containers=settings.max_json_containers,
                hooks=parts.hooks,
                body_budget=parts.body_budget,
                heavy_calls=parts.heavy_calls,
            ),
        )

    return build


def _vmp_app(store: VmpStore, parts: AppParts) -> Starlette:
    """VMP's builder adapted to the table's call shape (its own key and limits)."""
    settings = parts.settings
    key = settings.vmp_api_key.get_secret_value() if settings.vmp_api_key else None
    previous = settings.vmp_previous_api_key
    return build_vmp_app(
        store,
        api_key=key,
        previous_keys=[previous.get_secret_value()] if previous and key else [],
        allow_no_key=is_loopback_host(settings.host),
        max_body_bytes=settings.max_body_bytes,
        max_snapshot_bytes=settings.vmp_max_snapshot_bytes,
    )


class _MemoryLimits(TypedDict):
    embedding_dim: int
    max_batch: int
    max_top_k: int
    max_scope_any: int
    quota: Quota
    max_page: int
    filterable_fields: tuple[str, ...]
    retention_s: float | None


class _AffectLimits(TypedDict):
    max_batch: int
    max_page: int
    max_scope_any: int
    quota: Quota


def _memory_limits(settings: Settings) -> _MemoryLimits:
    """What the memory store takes from the settings, whichever its backend."""
    return _MemoryLimits(
        embedding_dim=settings.memory_embedding_dim,
        max_batch=settings.max_batch,
        max_top_k=settings.max_top_k,
        max_scope_any=settings.max_scope_any,
        quota=memory_quota(settings.memory_quota_chunks, settings.memory_quota_bytes),
        max_page=settings.memory_max_page,
        filterable_fields=fields_setting(settings.memory_filterable_fields),
        retention_s=settings.memory_retention_s,
    )


def _file(settings: Settings) -> ConnectionOptions:
    """How a plane's SQLite file is opened: the house defaults, the disk reserve and
    group commit."""
    return ConnectionOptions(
        disk_reserve_bytes=settings.disk_reserve_bytes, group_commit=settings.group_commit
    )


def _affect_limits(settings: Settings) -> _AffectLimits:
    """What the affect store takes from the settings, whichever its backend."""
    return _AffectLimits(
        max_batch=settings.max_batch,
        max_page=settings.max_page,
        max_scope_any=settings.max_scope_any,
        quota=affect_quota(settings.affect_quota_keys, settings.affect_quota_bytes),
    )


MemoryStore: TypeAlias = "SqliteMemoryStore | PostgresMemoryStore"
AffectStore: TypeAlias = "SqliteAffectStore | PostgresAffectStore"


def _read_through(store: MemoryStore | AffectStore) -> object:
    """What /readyz reads: a round trip to the server and whether a commit can be
    acknowledged now (CommitsBlocked when a synchronous standby is missing), or the
    file's schema version."""
    if isinstance(store, SqliteMemoryStore | SqliteAffectStore):
        return store.database.schema_version()
    from ratatoskr.postgres.replication import check_commits_complete  # noqa: PLC0415 - psycopg only for a DSN

    health = store.health()
    check_commits_complete(store.database)
    return health


def _index_cache(conn: apsw.Connection, dim: int) -> tuple[bool, str]:
    """The memory index's sidecar: fine unless the next open must rebuild it."""
    verdict = cache_verdict(conn, dim)
    return verdict.status != "rebuild", verdict.detail


def _chunk_count(store: MemoryStore) -> int:
    return store.count()


_SYNC_HINT = "see RATATOSKR_POSTGRES_REQUIRE_SYNC_STANDBY and docs/scaling.md"


def _on_postgres(
    open_store: Callable[[pg.Pool, str, Settings], PostgresMemoryStore | PostgresAffectStore],
    read_dsn: Callable[[Settings], str | None],
) -> Callable[[pg.Pool, str, Settings], Any]:
    """``open_store`` after the synchronous-standby check (a warning, or a refusal with
    POSTGRES_REQUIRE_SYNC_STANDBY), its writes' wait for the standby bounded by
    POSTGRES_SYNC_WAIT_S, with the plane's read replica (the DSN ``read_dsn`` reads)
    attached when one is set."""

    def open_(pool: pg.Pool, schema: str, s: Settings) -> Any:
        from ratatoskr.postgres import database, open_pool, replica, replication  # noqa: PLC0415 - psycopg only for a DSN

        replication.check_synchronous_standby(
            database.PoolRunner(pool),
            require=s.postgres_require_sync_standby,
            what=f"schema {schema}",
            hint=_SYNC_HINT,
        )
        store = open_store(pool, schema, s)
        store.database.sync_wait = s.postgres_sync_wait_s
        replica_dsn = read_dsn(s)
        if replica_dsn:
            try:
                # A read replica's pool: as preflight's, the primary's.
                options = database.PoolOptions(min_size=1, max_size=4, connect_timeout=5)
                reads = replica.ReadReplica(open_pool(replica_dsn, options), owns_pool=True)
            except BaseException:
                store.close()
                raise
            store.database.use_replica(reads)
        return store

    return open_


B = TypeVar("B", bound="MemoryStore | AffectStore")


def _bifrost_entry(
    wire: PlaneSpec[Any],
    open_file: Callable[[str, Settings], B],
    open_postgres: Callable[[pg.Pool, str, Settings], PostgresMemoryStore | PostgresAffectStore],
    read_dsn: Callable[[Settings], str | None],
    newest_version: Callable[[Settings], int],
) -> PlaneEntry[B]:
    """A Bifrost plane (``wire``) as every one is served: its database in the
    ``<name>_db`` setting, guarded by the Heimdall key, bifrost's keyed app, read
    through by /readyz, and on PostgreSQL in schema ``ratatoskr_<name>`` with the
    read replica ``read_dsn`` names."""
    return PlaneEntry(
        name=wire.name,
        db_field=f"{wire.name}_db",
        key=Key.HEIMDALL,
        open_file=open_file,
        postgres=PostgresBackend(f"ratatoskr_{wire.name}", _on_postgres(open_postgres, read_dsn)),
        build_app=bifrost_plane_app(wire),
        newest_version=newest_version,
        read=_read_through,
        wire=wire,
    )


def _open_memory_file(path: str, s: Settings) -> MemoryStore:
    return open_memory_store(path, options=_file(s), **_memory_limits(s))


def _open_memory_postgres(pool: pg.Pool, schema: str, s: Settings) -> PostgresMemoryStore:
    from ratatoskr.memory.postgres import open_postgres_memory_store  # noqa: PLC0415 - psycopg only for a DSN

    return open_postgres_memory_store(pool, schema=schema, **_memory_limits(s))


def _open_affect_postgres(pool: pg.Pool, schema: str, s: Settings) -> PostgresAffectStore:
    from ratatoskr.affect.postgres import open_postgres_affect_store  # noqa: PLC0415 - psycopg only for a DSN

    return open_postgres_affect_store(pool, schema=schema, **_affect_limits(s))


_MEMORY: PlaneEntry[MemoryStore] = replace(
    _bifrost_entry(
        MEMORY_PLANE,
        _open_memory_file,
        _open_memory_postgres,
        lambda s: s.memory_read_db,
        lambda s: len(memory_schema.migrations(s.memory_embedding_dim)),
    ),
    fixed=FixedSetting("embedding_dim", "memory_embedding_dim", lambda s: s.memory_embedding_dim),
    count=_chunk_count,
    # sqlite-vec never reuses a deleted vector's slot: the vector table is rebuilt first.
    compact_file=lambda path, full, vectors: compact_memory_file(path, full=full, vectors=vectors),
    beside=(INDEX_SUFFIX,),
    probe=lambda conn, s: _index_cache(conn, s.memory_embedding_dim),
)

_AFFECT: PlaneEntry[AffectStore] = _bifrost_entry(
    AFFECT_PLANE,
    lambda path, s: open_affect_store(path, options=_file(s), **_affect_limits(s)),
    _open_affect_postgres,
    lambda s: s.affect_read_db,
    lambda s: len(affect_schema.MIGRATIONS),
)

_VMP: PlaneEntry[VmpStore] = PlaneEntry(
    name="vmp",
    db_field="vmp_db",
    key=Key.VMP,
    open_file=lambda path, s: open_vmp_store(
        path, dim=s.vmp_dim, max_records=s.vmp_max_records, options=_file(s)
    ),
    dsn_refused=VMP_DSN_REFUSED,
    build_app=_vmp_app,
    newest_version=lambda s: len(vmp_schema.MIGRATIONS),
    read=VmpStore.record_count,
    fixed=FixedSetting("dim", "vmp_dim", lambda s: s.vmp_dim),
    count=VmpStore.record_count,
    backup_hint="--plane vmp: VMP is backed up with its snapshot (GET /vmp/v1/snapshot/download) "
    "and restored with POST /vmp/v1/snapshot/upload",
)

# In the order the planes are listed, opened, mounted and checked.
PLANE_TABLE: dict[Plane, PlaneEntry[Any]] = {e.name: e for e in (_MEMORY, _AFFECT, _VMP)}
PLANES: tuple[Plane, ...] = tuple(PLANE_TABLE)


def entry(plane: Plane) -> PlaneEntry[Any]:
    """The table's entry for ``plane``. Raises KeyError for a name not in it."""
    return PLANE_TABLE[plane]
