"""Erasing affect keys from a SQLite affect store: ``delete_many`` and ``forget``.

A key goes with its whole history: its history rows, its current row and its
scope-index rows, in one transaction (:func:`remove_keys`); ``secure_delete``
zeroes what the deletes free and the erasure is flushed by a truncating
checkpoint (:mod:`ratatoskr.sqlite.erasure`): in the background ~1 s after a
delete, at once when ``forget`` returns.

``forget`` finds the keys through ``affect_scope`` (the keys of one axis value),
keeps those whose current scope contains every axis, and erases them in
transactions of :data:`FORGET_BATCH` keys, each re-reading the keys' heads
inside its own transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import apsw

from ratatoskr.sqlite import codec

if TYPE_CHECKING:
    from ratatoskr.affect.store import SqliteAffectStore

FORGET_BATCH = 500
_FORGET_ROUNDS = 5

# key -> (key_id, revision, scope_json), as the store's heads.
Heads = Mapping[str, tuple[int, int, str]]


def remove_keys(conn: apsw.Connection, heads: Heads) -> None:
    """Delete the keys of ``heads`` with every revision; inside the caller's write."""
    if not heads:
        return
    conn.executemany(
        "DELETE FROM affect_history WHERE key_id = ?",
        [(key_id,) for key_id, _rev, _scope in heads.values()],
    )
    conn.executemany("DELETE FROM affect_current WHERE key = ?", [(k,) for k in heads])
    conn.executemany(
        "DELETE FROM affect_scope WHERE axis = ? AND value = ? AND key = ?",
        [
            (axis, value, key)
            for key, (_id, _rev, scope_json) in heads.items()
            for axis, value in codec.loads(scope_json).items()
        ],
    )


def _contains(scope_json: str, axes: Mapping[str, str]) -> bool:
    scope = codec.loads(scope_json)
    return all(scope.get(axis) == value for axis, value in axes.items())


def matching(conn: apsw.Connection, axes: Mapping[str, str]) -> list[str]:
    """Keys whose current scope contains ``axes``, in key order (a range of the
    scope index on the first axis, then each candidate's scope)."""
    axis, value = next(iter(sorted(axes.items())))
    return [
        str(key)
        for key, scope_json in conn.execute(
            "SELECT s.key, c.scope_json FROM affect_scope s"
            " JOIN affect_current c ON c.key = s.key"
            " WHERE s.axis = ? AND s.value = ? ORDER BY s.key",
            (axis, value),
        )
        if _contains(str(scope_json), axes)
    ]


def forget(
    store: SqliteAffectStore,
    axes: Mapping[str, str],
    *,
    dry_run: bool = False,
    batch: int = FORGET_BATCH,
) -> int:
    """Erase every key (with its history) whose current scope contains ``axes``, in
    transactions of ``batch`` keys, then flush the erasure (WAL checkpointed and
    truncated). Returns how many keys were erased (``dry_run``: how many match).

    Raises StorageError subclasses; earlier batches stay erased (run it again)."""
    if not axes:
        raise ValueError("forget needs at least one scope axis")
    total = 0
    for _round in range(_FORGET_ROUNDS):
        with store.database.read() as conn:
            keys = matching(conn, axes)
        if dry_run:
            return len(keys)
        if not keys:
            break
        for start in range(0, len(keys), batch):
            part: Sequence[str] = keys[start : start + batch]
            with store.database.write() as conn:
                heads = {
                    key: head
                    for key, head in store._heads(conn, part).items()
                    if _contains(head[2], axes)
                }
                remove_keys(conn, heads)
            if heads:
                store.database.erasure.erased()
            total += len(heads)
    store.database.erasure.flush()
    return total
