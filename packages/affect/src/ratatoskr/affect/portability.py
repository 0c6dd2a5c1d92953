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

from bifrost.jsoncodec import canonical_json
from bifrost.portability import (
    ExportedKey,
    Held,
    ImportedKeys,
    ImportOutcome,
    OnConflict,
    plan_import,
    same_history,
)
from bifrost.records import canonical_record
from bifrost.scope import matches_scope
from ratatoskr.affect.listing import load_record
from ratatoskr.sqlite import Database, codec

__all__ = ["export_page", "import_keys"]

_SQL_CHUNK = 500
_History = tuple[tuple[int, dict[str, Any], str], ...]


def _histories(conn: apsw.Connection, key_ids: Sequence[int]) -> dict[int, _History]:
    """Every revision of each of ``key_ids``, oldest first."""
    out: dict[int, list[tuple[int, dict[str, Any], str]]] = {k: [] for k in key_ids}
    for start in range(0, len(key_ids), _SQL_CHUNK):
        part = tuple(key_ids[start : start + _SQL_CHUNK])
        for key_id, revision, rj, at in conn.execute(
            "SELECT key_id, revision, record_json, recorded_at FROM affect_history"
            f" WHERE key_id IN ({','.join('?' * len(part))}) ORDER BY key_id, revision",
            part,
        ):
            out[int(key_id)].append((int(revision), load_record(str(rj)), str(at)))
    return {k: tuple(v) for k, v in out.items()}


def export_page(
    db: Database, after_key: str | None, limit: int, scope_all: Mapping[str, str]
) -> tuple[list[ExportedKey], str | None]:
    """Up to ``limit`` keys after ``after_key`` in key order whose current scope contains
    ``scope_all``, each with its whole history (one read snapshot); and the cursor of
    the next page (None: done)."""
    with db.read() as conn:
        rows = conn.execute(
            "SELECT key, key_id, revision, scope_json FROM affect_current"
            " WHERE key > ? ORDER BY key LIMIT ?",
            ("" if after_key is None else after_key, limit),
        ).fetchall()
        wanted = [
            (str(key), int(key_id), int(rev))  # type: ignore[arg-type]
            for key, key_id, rev, sj in rows
            if not scope_all or matches_scope(codec.loads(str(sj)), scope_all, None)
        ]
        histories = _histories(conn, [key_id for _k, key_id, _r in wanted])
    out = [ExportedKey(key, rev, histories[key_id]) for key, key_id, rev in wanted]
    return out, str(rows[-1][0]) if len(rows) == limit else None


def _text(record: Mapping[str, Any]) -> str:
    return canonical_json(dict(record)).decode("utf-8")


def import_keys(
    db: Database,
    batch: ImportedKeys,
    on_conflict: OnConflict,
    *,
    allow_scope_change: bool = False,
) -> ImportOutcome:
    """Write ``batch``, each key with its whole history, in one transaction (see the
    module docstring). Raises ImportConflict, ImportScopeChange (nothing written),
    StorageError subclasses."""
    keys = [k.key for k in batch.keys]
    with db.write() as conn:
        heads: dict[str, tuple[int, str]] = {}
        for start in range(0, len(keys), _SQL_CHUNK):
            part = tuple(keys[start : start + _SQL_CHUNK])
            for key, key_id, sj in conn.execute(
                "SELECT key, key_id, scope_json FROM affect_current"
                f" WHERE key IN ({','.join('?' * len(part))})",
                part,
            ):
                heads[str(key)] = (int(key_id), str(sj))
        held = _histories(conn, [h[0] for h in heads.values()])
        found: dict[str, Held] = {}
        for imported in batch.keys:
            head = heads.get(imported.key)
            if head is None:
                continue
            mine = [(r.revision, _text(r.item.record), r.recorded_at) for r in imported.history]
            theirs = [(rev, _text(rec), at) for rev, rec, at in held[head[0]]]
            found[imported.key] = Held(
                same=same_history(theirs, mine),
                revision=theirs[-1][0],
                rescoped=codec.loads(head[1]) != dict(imported.current.item.scope),
            )
        plan = plan_import(
            keys,
            [k.current.revision for k in batch.keys],
            found,
            on_conflict,
            allow_scope_change=allow_scope_change,
        )
        if plan.over:
            _erase(conn, [(keys[i], *heads[keys[i]]) for i in plan.over])
        if plan.new or plan.over:
            _write(conn, batch, sorted(plan.new + plan.over), plan.revisions)
    return plan.outcome


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
    batch: ImportedKeys,
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
