"""The durable affect store: keyed affect state with every revision kept, in SQLite.

Implements bifrost's ``AffectDataStore`` exactly. Every rule of the plane
(record shape, reserved fields, limits, idempotency ids and digests, paging
arguments) comes from ``bifrost.affect``, the same code the reference
``InMemoryAffectStore`` runs; this module owns only persistence. The store
reads ``key`` and ``scope`` of a record and nothing else; the record is kept as
the canonical JSON validation made of it and handed back equal.

A ``put_many`` is one ``BEGIN IMMEDIATE`` transaction along bifrost's write
path (:mod:`bifrost.writes`; the clock is read inside it): ledger lookup →
revision checks → history rows (the records, appended), current rows (pointers
to them), scope-index rows (only for a scope that changed) → ledger pruned and
entry recorded. It commits whole or not at all, so a replay sees all of the
first call or none of it, and a crash never leaves part of a batch. The tables
are described in :mod:`ratatoskr.affect.schema`.

Reads bind a ``LIMIT`` as ``+?`` and look keys up with ``IN (?)``: this SQLite
(built with STAT4) lets the planner look at the value bound to a ``LIMIT ?`` or to
the key of a join, and a statement planned from a bound value is re-prepared at
every new binding (measured: docs/decisions.md). ``+?`` is the same value to
SQLite, and the same plan, without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Unpack

import apsw

from bifrost.affect.protocol import AffectOptions, AffectReads, AffectWrites, affect_limits
from bifrost.affect.validation import (
    HistoryQuery,
    ListQuery,
    ValidatedAffect,
)
from bifrost.records import canonical_record
from bifrost.timestamps import rfc3339
from bifrost.writes import WriteRequest, batch_tenants, begin_write, check_quota, deletable
from ratatoskr.affect import erase, portability
from ratatoskr.affect.listing import fetch_current, list_page, load_record
from ratatoskr.affect.portable_store import KeyPortability, PortableKeys
from ratatoskr.affect.schema import LEDGER, MIGRATIONS, PLANE, QUOTA, TABLES
from ratatoskr.sqlite import ConnectionOptions, Database, Written, codec

__all__ = ["RatatoskrAffectStore", "SqliteAffectStore", "open_affect_store"]

_SQL_CHUNK = 500
# Module-level because the class's ``list`` verb shadows the builtin inside it.
_Rows = list[tuple[Any, ...]]
_Items = list[dict[str, Any]]


def _scope_json(scope: dict[str, str]) -> str:
    # Canonical JSON (keys sorted, compact, not ASCII-escaped): the text the at-rest
    # codec writes for the sorted scope, made by orjson (with the standard library it
    # was a third of a write's CPU).
    return canonical_record(scope)[0].decode("utf-8")


def _parse_scopes(texts: dict[str, str]) -> dict[str, dict[str, str]]:
    """``key → scope`` from ``key → scope_json`` (keys share few scopes: each distinct
    text is parsed once)."""
    parsed: dict[str, dict[str, str]] = {text: codec.loads(text) for text in set(texts.values())}
    return {key: parsed[text] for key, text in texts.items()}


class SqliteAffectStore(AffectWrites, AffectReads, PortableKeys):
    """An affect store over one SQLite database file (or ``":memory:"``)."""

    transfer: ClassVar[KeyPortability] = portability  # export_page, import_keys

    def __init__(self, db: Database, **options: Unpack[AffectOptions]) -> None:
        # Options and their defaults: bifrost.affect.protocol.AffectOptions.
        self.take_options(options)
        self._db = db

    # -- descriptors -----------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Static facts plus a round trip to the database; never counts of data.

        Raises StorageError subclasses when the database cannot be read.
        """
        with self._db.read() as conn:
            conn.execute("SELECT 1").fetchall()
        return super().health()

    # -- writes ----------------------------------------------------------------------

    def perform_put(self, request: WriteRequest[ValidatedAffect], actor: str) -> dict[str, Any]:
        """History rows, current rows and scope-index rows of the batch, in one
        transaction."""

        def batch(conn: apsw.Connection) -> Written[dict[str, Any]]:
            write = begin_write(LEDGER.within(conn), request, actor, self._clock())
            if write.replayed is not None:
                return Written(write.replayed)
            heads = self._heads(conn, request.ids)
            write.check(
                _parse_scopes({key: head[2] for key, head in heads.items()}),
                {key: head[1] for key, head in heads.items()},
            )
            if request:
                self._write(conn, request, heads, rfc3339(write.now))
                if self.quota.enabled:  # the usage the triggers left
                    check_quota(QUOTA.read(conn, batch_tenants(request)), self.quota)
            return Written(write.record())

        # Concurrent puts of this process may share one COMMIT, each in its own
        # savepoint (ratatoskr.sqlite.group).
        return self._db.write_batch(batch)

    @staticmethod
    def _write(
        conn: apsw.Connection,
        items: WriteRequest[ValidatedAffect],
        heads: dict[str, tuple[int, int, str]],
        stamp: str,
    ) -> None:
        # History ids go on from the largest (one lookup at the table's right edge):
        # explicit, so each current row can point at its history row.
        next_id = int(
            conn.execute("SELECT coalesce(max(id), 0) + 1 FROM affect_history").fetchall()[0][0]  # type: ignore[arg-type]
        )
        history: list[tuple[Any, ...]] = []
        created: list[tuple[Any, ...]] = []
        moved: list[tuple[Any, ...]] = []
        scope_del: list[tuple[str, str, str]] = []
        scope_add: list[tuple[str, str, str]] = []
        # A key's history_bytes grow by each revision's size (its quota usage).
        sizes = items.record_sizes()
        for row_id, (it, size) in enumerate(zip(items, sizes, strict=True), next_id):
            scope_json = _scope_json(it.scope)
            old = heads.get(it.key)
            if old is None:
                # A new key is named by the id of its first revision's row.
                history.append((row_id, row_id, 1, it.record_json, stamp))
                created.append((it.key, row_id, 1, row_id, scope_json, size))
                scope_add += [(a, v, it.key) for a, v in it.scope.items()]
                continue
            key_id, revision = old[0], old[1] + 1
            history.append((row_id, key_id, revision, it.record_json, stamp))
            moved.append((revision, row_id, scope_json, size, it.key))
            if old[2] != scope_json:
                old_scope: dict[str, str] = codec.loads(old[2])
                scope_del += [(a, v, it.key) for a, v in old_scope.items()]
                scope_add += [(a, v, it.key) for a, v in it.scope.items()]
        conn.executemany(
            "INSERT INTO affect_history (id, key_id, revision, record_json, recorded_at)"
            " VALUES (?, ?, ?, ?, ?)",
            history,
        )
        # Two statements, not an upsert: a plain UPDATE of a known row costs ~3/4.
        if moved:
            conn.executemany(
                "UPDATE affect_current SET revision = ?, head = ?, scope_json = ?,"
                " history_bytes = history_bytes + ? WHERE key = ?",
                moved,
            )
        if created:
            conn.executemany(
                "INSERT INTO affect_current (key, key_id, revision, head, scope_json,"
                " history_bytes) VALUES (?, ?, ?, ?, ?, ?)",
                created,
            )
        if scope_del:
            conn.executemany(
                "DELETE FROM affect_scope WHERE axis = ? AND value = ? AND key = ?", scope_del
            )
        if scope_add:
            conn.executemany(
                "INSERT INTO affect_scope (axis, value, key) VALUES (?, ?, ?)", scope_add
            )

    def perform_delete(self, keys: Sequence[str], grant: Mapping[str, str]) -> int:
        """Erase current rows, history rows and scope-index rows of the keys inside
        ``grant``, in one transaction that reads their scopes and decides the grant
        (:func:`~bifrost.writes.deletable`): a key another tenant writes meanwhile
        stays."""
        with self._db.write() as conn:
            heads = self._heads(conn, keys)
            scopes = _parse_scopes({key: head[2] for key, head in heads.items()})
            heads = {key: heads[key] for key in deletable(keys, scopes, grant)}
            erase.remove_keys(conn, heads)
        if heads:
            self._db.erasure.erased()  # flushed by a truncating checkpoint (erase.py)
        return len(heads)

    def forget(self, scope: Mapping[str, str], *, dry_run: bool = False) -> int:
        """Erase every key (whole history) whose scope contains ``scope``'s axes
        (:func:`ratatoskr.affect.erase.forget`); returns the count."""
        return erase.forget(self, scope, dry_run=dry_run)

    # -- reads -----------------------------------------------------------------------

    def perform_get(self, keys: Sequence[str]) -> _Items:
        """Current rows, in one read snapshot."""
        with self._db.read() as conn:
            found = fetch_current(conn, keys)
        return [
            {**found[k][0], "revision": found[k][2], "recorded_at": found[k][3]}
            for k in keys
            if k in found
        ]

    def perform_history(self, query: HistoryQuery) -> dict[str, Any]:
        """One keyset page of ``affect_history``, newest first."""
        # Revisions are >= 1, so "before" a huge revision means "from the newest".
        before = query.before_revision if query.before_revision is not None else 2**62
        with self._db.read() as conn:
            # One statement, so one snapshot: an unknown key's key_id is NULL (no rows).
            rows = conn.execute(
                "SELECT revision, record_json, recorded_at FROM affect_history"
                " WHERE key_id = (SELECT key_id FROM affect_current WHERE key = ?)"
                " AND revision < ? ORDER BY revision DESC LIMIT +?",
                (query.key, before, query.limit + 1),
            ).fetchall()
        page = rows[: query.limit]
        items = [
            {**load_record(str(rj)), "revision": int(rev), "recorded_at": str(at)}  # type: ignore[arg-type]
            for rev, rj, at in page
        ]
        more = len(rows) > query.limit
        return {"items": items, "next_before_revision": items[-1]["revision"] if more else None}

    def perform_list(self, query: ListQuery) -> dict[str, Any]:
        """One page driven by the ``affect_scope`` index (:mod:`ratatoskr.affect.listing`)."""
        with self._db.read() as conn:
            return list_page(
                conn,
                scope_all=query.scope_all,
                scope_any=query.scope_any,
                limit=query.limit,
                after_key=query.after_key,
            )

    # -- plumbing --------------------------------------------------------------------

    def close(self) -> None:
        """Close the database; idempotent. Later calls raise StorageUnavailable."""
        self._db.close()

    @property
    def database(self) -> Database:
        return self._db

    def dump(self) -> dict[str, _Rows]:
        """Every row of every affect table, sorted (for operators' checks and tests)."""
        with self._db.read() as conn:
            return {
                t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in TABLES
            }

    @staticmethod
    def _heads(conn: apsw.Connection, keys: Sequence[str]) -> dict[str, tuple[int, int, str]]:
        """``key → (key_id, revision, scope_json)`` of the keys that exist."""
        out: dict[str, tuple[int, int, str]] = {}
        for start in range(0, len(keys), _SQL_CHUNK):
            part = tuple(keys[start : start + _SQL_CHUNK])
            marks = ",".join("?" * len(part))
            for key, key_id, revision, scope_json in conn.execute(
                "SELECT key, key_id, revision, scope_json FROM affect_current"
                f" WHERE key IN ({marks})",
                part,
            ):
                out[str(key)] = (int(key_id), int(revision), str(scope_json))
        return out


# The name before the PostgreSQL stores arrived (kept: code and tests import it).
RatatoskrAffectStore = SqliteAffectStore


def open_affect_store(
    db_path: str,
    *,
    options: ConnectionOptions | None = None,
    **store_options: Unpack[AffectOptions],
) -> SqliteAffectStore:
    """Open (creating the schema on first use) the affect store at ``db_path``.

    ``":memory:"`` gives a private in-memory database. ``store_options``
    (:class:`bifrost.affect.protocol.AffectOptions`) go to the store: ``quota`` is the
    per-tenant quota (:mod:`bifrost.quota`; a write past it raises QuotaExceeded,
    nothing written). Raises ValueError (InvalidLimits) for non-positive limits,
    before the file is touched, and StorageError subclasses (StorageUnavailable,
    StorageCorrupt, StorageReadOnly, SchemaTooNew) for unusable files.
    """
    affect_limits(store_options)
    db = Database(db_path, plane=PLANE, migrations=MIGRATIONS, options=options)
    try:
        return SqliteAffectStore(db, **store_options)
    except BaseException:
        db.close()
        raise
