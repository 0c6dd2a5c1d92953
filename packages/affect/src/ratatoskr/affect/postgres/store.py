"""The affect store on PostgreSQL: keyed affect state with every revision kept.

Implements bifrost's ``AffectDataStore`` exactly. Every rule of the plane comes
from ``bifrost.affect`` — the code the reference ``InMemoryAffectStore`` and the
SQLite store run; this module owns persistence only. It reads ``key`` and
``scope`` of a record and nothing else; the rest is kept as canonical JSON text
and handed back equal.

A ``put_many`` is bifrost's write path in one transaction
(``ratatoskr.postgres.writes.run_write``); its own SQL is two statements: upsert
the current rows in key order with ``revision = revision + 1 … RETURNING``
(which locks each row and reports the revision it replaced, for the revision
check) and append the history rows. Reads are single statements, so each sees
one snapshot; pages are keyset pages (never offsets).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Unpack

from psycopg import Cursor, sql

from bifrost.affect.protocol import AffectOptions, AffectReads, AffectWrites, affect_limits
from bifrost.affect.validation import (
    HistoryQuery,
    ListQuery,
    ValidatedAffect,
)
from bifrost.jsoncodec import canonical_json, json_loads_exact
from bifrost.timestamps import rfc3339
from bifrost.writes import WriteRequest
from ratatoskr.affect.portable_store import KeyPortability, PortableKeys
from ratatoskr.affect.postgres import portability
from ratatoskr.affect.postgres import schema as affect_schema
from ratatoskr.postgres.arrays import int8_array, text_array, utf8_text_array
from ratatoskr.postgres.database import Pool, PoolOptions, PostgresDatabase, on_table, open_schema
from ratatoskr.postgres.erase import delete_granted, forget_rows, locked_scopes_sql
from ratatoskr.postgres.scope import (
    StatementCache,
    conjunction_sql,
    conjunctions,
    filter_params,
    filter_shape,
    scope_arrays,
    scope_column_list,
    scope_sets,
    scopes_by_key,
)
from ratatoskr.postgres.store import SchemaStore
from ratatoskr.postgres.text import from_db, to_db
from ratatoskr.postgres.writes import Replaced, grant_params, grant_predicate, revisions_before

__all__ = ["AffectStoreOptions", "PostgresAffectStore", "open_postgres_affect_store"]

# Module-level because the class's ``list`` verb shadows the builtin inside it.
_Items = list[dict[str, Any]]
_Records = dict[str, dict[str, Any]]
_Params = list[Any]
_Parts = list[sql.Composable]


def _view(record_json: Any, revision: Any, recorded_at: Any) -> dict[str, Any]:
    record: dict[str, Any] = json_loads_exact(str(record_json))
    return {**record, "revision": int(revision), "recorded_at": str(recorded_at)}


class PostgresAffectStore(AffectWrites, AffectReads, PortableKeys, SchemaStore):
    """An affect store over one schema of a PostgreSQL server (see the module docstring)."""

    transfer: ClassVar[KeyPortability] = portability  # export_page, import_keys

    def __init__(self, db: PostgresDatabase, **options: Unpack[AffectStoreOptions]) -> None:
        # Options and their defaults: bifrost.affect.protocol.AffectOptions.
        self.take_options(options)
        SchemaStore.__init__(self, db, affect_schema.TABLES, self._clock, self.quota)
        self._current = db.table(affect_schema.CURRENT)
        self._list_by_shape = StatementCache()
        self._compose_writes(self._current, db.table(affect_schema.HISTORY))
        self._compose_reads(self._current, db.table(affect_schema.HISTORY))

    def _compose_writes(self, cur_t: sql.Composed, hist_t: sql.Composed) -> None:
        # unnest keeps the arrays' order and ORDER BY makes it the write (and lock) order.
        self._upsert_sql = sql.SQL(
            "INSERT INTO {t} AS c (key, {axes}, revision, record_json, recorded_at,"
            " history_bytes) SELECT u.k, u.e, u.g, u.n, u.a, 1, u.r, %s, u.b FROM unnest("
            "%b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[],"
            " %b::int8[]) WITH ORDINALITY AS u(k, e, g, n, a, r, b, o) ORDER BY u.o"
            " ON CONFLICT (key) DO UPDATE SET {sets}, revision = c.revision + 1,"
            " record_json = EXCLUDED.record_json, recorded_at = EXCLUDED.recorded_at,"
            # A key's quota usage: the bytes of every revision it keeps.
            " history_bytes = c.history_bytes + EXCLUDED.history_bytes"
            " WHERE {inside} RETURNING key, revision"
        ).format(t=cur_t, axes=scope_column_list(), sets=scope_sets(), inside=grant_predicate("c"))
        self._scopes_sql = sql.SQL("SELECT key, {axes} FROM {t} WHERE key = ANY(%b)").format(
            t=cur_t, axes=scope_column_list()
        )
        self._history_sql = on_table(
            hist_t,
            "INSERT INTO {t} (key, revision, record_json, recorded_at)"
            " SELECT u.k, u.v, u.r, %s FROM unnest(%b::text[], %b::bigint[], %b::text[])"
            " AS u(k, v, r)",
        )
        self._lock_sql = locked_scopes_sql(cur_t, "key")
        self._delete_current_sql = on_table(
            cur_t, "DELETE FROM {t} WHERE key = ANY(%b) RETURNING key"
        )
        self._delete_history_sql = on_table(hist_t, "DELETE FROM {t} WHERE key = ANY(%b)")

    def _compose_reads(self, cur_t: sql.Composed, hist_t: sql.Composed) -> None:
        self._fetch_sql = on_table(
            cur_t, "SELECT key, record_json, revision, recorded_at FROM {t} WHERE key = ANY(%b)"
        )
        self._page_sql = on_table(
            hist_t,
            "SELECT revision, record_json, recorded_at FROM {t}"
            " WHERE key = %s AND revision < %s ORDER BY revision DESC LIMIT %s",
        )

    # -- descriptors -----------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Static facts plus a round trip to the server; never counts of data.

        Raises StorageError subclasses when the server cannot be reached."""
        self._ping()
        return super().health()

    # -- writes ----------------------------------------------------------------------

    def perform_put(self, request: WriteRequest[ValidatedAffect], actor: str) -> dict[str, Any]:
        """``put_many`` after bifrost's validation (``AffectWrites``): the next revision of
        every record's key, atomically and idempotently.

        Raises IdempotencyConflict, Forbidden, RevisionMismatch (nothing written on
        any), StorageError subclasses.
        """
        # Rows in stored-key order: the order the statement writes and locks them in.
        ordered = sorted(request.items, key=lambda it: to_db(it.key))
        keys = [to_db(it.key) for it in ordered]
        encoded = [canonical_json(it.record) for it in ordered]
        key_array = text_array(keys)
        bodies = utf8_text_array(encoded)
        sizes = int8_array([len(body) for body in encoded])
        columns = scope_arrays([it.scope for it in ordered])
        grant = grant_params(request.grant)

        def perform(cur: Cursor[Any], now: float) -> Replaced:
            stamp = rfc3339(now)
            cur.execute(self._upsert_sql, (stamp, key_array, *columns, bodies, sizes, *grant))
            written = cur.fetchall()
            revisions = {str(k): int(rev) for k, rev in written}
            refused = [k for k in keys if k not in revisions]
            if refused:
                # Rows outside the grant (locked by the statement): the write is refused
                # and rolled back, so no history row is appended.
                rows = cur.execute(self._scopes_sql, (refused,), binary=True).fetchall()
                return Replaced(revisions_before(written, from_db), scopes_by_key(rows, from_db))
            versions = int8_array([revisions[k] for k in keys])
            cur.execute(self._history_sql, (stamp, key_array, versions, bodies))
            return Replaced(revisions_before(written, from_db), {})

        return self._write(request, actor, perform)

    def perform_delete(self, keys: Sequence[str], grant: Mapping[str, str]) -> int:
        """Erase the current state and all history of the distinct ``keys`` inside
        ``grant``, in one transaction: their current rows locked, the grant decided on
        the scopes read (:func:`ratatoskr.postgres.erase.granted`); how many existed
        inside it."""

        # Current rows first: they are what writers lock, in the same key order.
        def delete(cur: Cursor[Any], chosen: list[str]) -> int:
            cur.execute(self._delete_current_sql, (chosen,))
            present = [str(r[0]) for r in cur.fetchall()]
            if present:
                cur.execute(self._delete_history_sql, (present,))
            return len(present)

        return delete_granted(self._db, self._lock_sql, keys, grant, delete)

    def forget(self, scope: Mapping[str, str], *, dry_run: bool = False) -> int:
        """Erase every key (whole history) whose scope contains ``scope``'s axes, in
        bounded transactions (:func:`ratatoskr.postgres.erase.forget_rows`); the count."""

        def history(cur: Cursor[Any], keys: list[str]) -> None:
            cur.execute(self._delete_history_sql, (keys,))

        return forget_rows(
            self._db, affect_schema.CURRENT, "key", scope, dry_run=dry_run, then=history
        )

    # -- reads (validated by bifrost's AffectReads) ----------------------------------

    def perform_get(self, keys: Sequence[str]) -> _Items:
        """The current records of the distinct ``keys`` that exist, in order."""
        found = self._fetch(keys) if keys else {}
        return [found[k] for k in keys if k in found]

    def perform_history(self, query: HistoryQuery) -> dict[str, Any]:
        """Revisions of a key newest first, keyset-paged: ``{"items",
        "next_before_revision"}``, the cursor the oldest revision of the page when older
        ones exist."""
        q = query
        # Revisions are >= 1, so "before" a huge revision means "from the newest".
        before = q.before_revision if q.before_revision is not None else 2**62
        params = (to_db(q.key), before, q.limit + 1)
        rows = self._db.read(
            lambda cur: cur.execute(self._page_sql, params, binary=True).fetchall()
        )
        items = [_view(rj, rev, at) for rev, rj, at in rows[: q.limit]]
        more = len(rows) > q.limit
        return {"items": items, "next_before_revision": items[-1]["revision"] if more else None}

    def perform_list(self, query: ListQuery) -> dict[str, Any]:
        """Current records in scope by key ascending, keyset-paged: ``{"items",
        "next_after_key"}``."""
        q = query
        conjs = conjunctions(q.scope_all, q.scope_any)
        if not conjs:
            return {"items": [], "next_after_key": None}
        # "" sorts before every key (keys are non-empty): "from the start".
        after = "" if q.after_key is None else to_db(q.after_key)
        statement, params = self._list_sql(conjs, after, q.limit + 1)
        rows = self._db.read(lambda cur: cur.execute(statement, params, binary=True).fetchall())
        page = rows[: q.limit]
        items = [_view(rj, rev, at) for _key, rj, rev, at in page]
        more = len(rows) > q.limit
        return {"items": items, "next_after_key": from_db(str(page[-1][0])) if more else None}

    def _list_sql(
        self, conjs: Sequence[dict[str, str]], after: str, want: int
    ) -> tuple[bytes, _Params]:
        """One statement (one snapshot): per conjunction the first ``want`` keys after
        the cursor, walked in key order on its ``(axis, key)`` index; their union's
        first ``want`` keys; those keys' current rows. Rendered once per filter shape."""
        params: _Params = []
        for conj in conjs:
            params += [*filter_params([conj]), after, want]
        params.append(want)
        shape = filter_shape(conjs)
        cached = self._list_by_shape.get(shape)
        if cached is not None:
            return cached, params
        parts: _Parts = []
        for conj in conjs:
            where, _values = conjunction_sql(conj)
            parts.append(
                sql.SQL(
                    "(SELECT key FROM {t} WHERE {w} AND key > %s ORDER BY key LIMIT %s)"
                ).format(t=self._current, w=where)
            )
        union = parts[0] if len(parts) == 1 else sql.SQL(" UNION ").join(parts)
        statement = sql.SQL(
            "SELECT c.key, c.record_json, c.revision, c.recorded_at FROM {t} AS c"
            " WHERE c.key IN (SELECT key FROM ({u}) AS u ORDER BY key LIMIT %s)"
            " ORDER BY c.key"
        ).format(t=self._current, u=union)
        return self._list_by_shape.put(shape, statement), params

    # -- plumbing --------------------------------------------------------------------

    def _fetch(self, keys: Sequence[str]) -> _Records:
        stored = [to_db(k) for k in keys]
        rows = self._db.read(
            lambda cur: cur.execute(self._fetch_sql, (stored,), binary=True).fetchall()
        )
        return {from_db(str(k)): _view(rj, rev, at) for k, rj, rev, at in rows}


AffectStoreOptions = AffectOptions
"""The keyword arguments of :class:`PostgresAffectStore` (bifrost's ``AffectOptions``)."""


def open_postgres_affect_store(
    dsn: str | Pool,
    *,
    schema: str = "ratatoskr_affect",
    pool_options: PoolOptions | None = None,
    **options: Unpack[AffectStoreOptions],
) -> PostgresAffectStore:
    """Open (creating the schema and its tables on first use) the affect store in
    ``schema`` on the server of ``dsn`` — a libpq URI or key=value string, or an open
    pool to share (then ``close()`` leaves it open). ``options`` go to
    :class:`PostgresAffectStore`: ``quota`` is the per-tenant quota (``bifrost.quota``;
    a write past it raises QuotaExceeded, nothing written).

    Raises ValueError for a bad schema name or limits; StorageUnavailable,
    ForeignDatabase, SchemaTooNew.
    """
    affect_limits(options)  # before the schema is made: bad limits change nothing
    return open_schema(
        dsn,
        lambda db: PostgresAffectStore(db, **options),
        schema=schema,
        plane=affect_schema.PLANE,
        migrations=affect_schema.migrations(schema),
        pool_options=pool_options,
    )
