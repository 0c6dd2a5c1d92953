"""Export and import of the SQLite affect store (``ratatoskr export`` / ``import``).

**Export** reads keyset pages of keys in key order (binary collation: code-point
order), each page with every revision of its keys in one read snapshot: a key
unchanged for the whole export is read exactly once, whole.

**Import** writes one validated batch (:mod:`bifrost.portability`) in one
``BEGIN IMMEDIATE`` transaction: the histories held under the batch's keys are
read, :func:`~bifrost.portability.plan_import` decides, and each key written
gets its history rows (with their own revisions and ``recorded_at``; a replaced
key's newest numbered by the plan), its current row and its scope-index rows,
in the layout of :mod:`ratatoskr.affect.schema` (a replaced key's rows are
erased first).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import apsw

from bifrost import portability
from bifrost.records import canonical_record
from bifrost.scope import matches_scope
from ratatoskr.affect.listing import load_record
from ratatoskr.sqlite import Database, codec
from ratatoskr.sqlite.keys import keyset_page, rows_in

__all__ = ["export_page", "import_keys"]


def _histories(conn: apsw.Connection, key_ids: Sequence[int]) -> dict[int, portability.History]:
    """Every revision of each of ``key_ids``, oldest first."""
    out: dict[int, list[tuple[int, dict[str, Any], str]]] = {k: [] for k in key_ids}
    for key_id, revision, rj, at in rows_in(
        conn,
        "SELECT key_id, revision, record_json, recorded_at FROM affect_history"
        " WHERE key_id IN ({keys}) ORDER BY key_id, revision",
        key_ids,
    ):
        out[int(key_id)].append((int(revision), load_record(str(rj)), str(at)))
    return {k: tuple(v) for k, v in out.items()}


def export_page(
    db: Database, after_key: str | None, limit: int, scope_all: Mapping[str, str]
) -> tuple[list[portability.ExportedKey], str | None]:
    """Up to ``limit`` keys after ``after_key`` in key order whose current scope contains
    ``scope_all``, each with its whole history (one read snapshot); and the cursor of
    the next page (None: done)."""
    with db.read() as conn:
        rows, cursor = keyset_page(
            conn, "affect_current", "key", "key_id, revision, scope_json", after_key, limit
        )
        wanted = [
            (str(key), int(key_id), int(rev))
            for key, key_id, rev, sj in rows
            if not scope_all or matches_scope(codec.loads(str(sj)), scope_all, None)
        ]
        histories = _histories(conn, [key_id for _k, key_id, _r in wanted])
    out = [portability.ExportedKey(key, rev, histories[key_id]) for key, key_id, rev in wanted]
    return out, cursor


class _ImportTx:
    """One import batch's SQL inside ``BEGIN IMMEDIATE`` (bifrost.portability.KeyImportTx)."""

    def __init__(self, conn: apsw.Connection) -> None:
        self._conn = conn
        # What held() found: each key's first history row id and its current scope.
        self._heads: dict[str, tuple[int, str]] = {}

    def held(self, keys: Sequence[str]) -> dict[str, portability.History]:
        for key, key_id, sj in rows_in(
            self._conn,
            "SELECT key, key_id, scope_json FROM affect_current WHERE key IN ({keys})",
            keys,
        ):
            self._heads[str(key)] = (int(key_id), str(sj))
        histories = _histories(self._conn, [h[0] for h in self._heads.values()])
        return {key: histories[key_id] for key, (key_id, _s) in self._heads.items()}

    def write(self, batch: portability.ImportedKeys, plan: portability.ImportPlan) -> None:
        keys = [k.key for k in batch.keys]
        if plan.over:
            _erase(self._conn, [(keys[i], *self._heads[keys[i]]) for i in plan.over])
        _write(self._conn, batch, sorted(plan.new + plan.over), plan.revisions)


def import_keys(
    db: Database,
    batch: portability.ImportedKeys,
    on_conflict: portability.OnConflict,
    *,
    allow_scope_change: bool = False,
) -> portability.ImportOutcome:
    """One ``BEGIN IMMEDIATE`` transaction for ``batch``: bifrost decides, the SQL
    above reads and writes. Raises ImportConflict, ImportScopeChange (nothing
    written), StorageError subclasses."""
    with db.write() as conn:
        return portability.import_key_batch(
            _ImportTx(conn), batch, on_conflict, allow_scope_change=allow_scope_change
        )


def _erase(conn: apsw.Connection, heads: Sequence[tuple[str, int, str]]) -> None:
    """The rows of keys an import replaces (history, current, scope index)."""
    conn.executemany(
        "DELETE FROM affect_history WHERE key_id = ?", [(key_id,) for _k, key_id, _s in heads]
    )
    conn.executemany("DELETE FROM affect_current WHERE key = ?", [(k,) for k, _i, _s in heads])
    conn.executemany(
        "DELETE FROM affect_scope WHERE axis = ? AND value = ? AND key = ?",
        [(a, v, k) for k, _i, sj in heads for a, v in codec.loads(sj).items()],
    )


def _write(
    conn: apsw.Connection,
    batch: portability.ImportedKeys,
    indexes: Sequence[int],
    numbers: Mapping[int, int],
) -> None:
    """History, current and scope-index rows of the keys at ``indexes``, the newest
    revision of each numbered ``numbers[i]``; history ids go on from the largest (a
    key is named by its first row's id)."""
    next_id = int(
        conn.execute("SELECT coalesce(max(id), 0) + 1 FROM affect_history").fetchall()[0][0]  # type: ignore[arg-type]
    )
    history: list[tuple[Any, ...]] = []
    current: list[tuple[Any, ...]] = []
    scope: list[tuple[str, str, str]] = []
    for i in indexes:
        imported = batch.keys[i]
        key_id = next_id
        for rev in imported.history[:-1]:
            history.append((next_id, key_id, rev.revision, rev.item.record_json, rev.recorded_at))
            next_id += 1
        head = imported.current
        history.append((next_id, key_id, numbers[i], head.item.record_json, head.recorded_at))
        next_id += 1
        current.append(
            (
                imported.key,
                key_id,
                numbers[i],
                next_id - 1,
                canonical_record(head.item.scope)[0].decode("utf-8"),
            )
        )
        scope += [(a, v, imported.key) for a, v in head.item.scope.items()]
    conn.executemany(
        "INSERT INTO affect_history (id, key_id, revision, record_json, recorded_at)"
        " VALUES (?, ?, ?, ?, ?)",
        history,
    )
    conn.executemany(
        "INSERT INTO affect_current (key, key_id, revision, head, scope_json)"
        " VALUES (?, ?, ?, ?, ?)",
        current,
    )
    conn.executemany("INSERT INTO affect_scope (axis, value, key) VALUES (?, ?, ?)", scope)
    if conn.execute(
        "SELECT 1 FROM pragma_table_info('affect_current') WHERE name = 'history_bytes'"
    ).fetchall():
        # A file with per-tenant usage (bifrost.quota): a key counts the bytes of every
        # revision it keeps, and the usage table's triggers follow this column.
        conn.executemany(
            "UPDATE affect_current SET history_bytes = (SELECT coalesce(sum(length(CAST("
            "h.record_json AS BLOB))), 0) FROM affect_history AS h"
            " WHERE h.key_id = affect_current.key_id) WHERE key = ?",
            [(row[0],) for row in current],
        )
