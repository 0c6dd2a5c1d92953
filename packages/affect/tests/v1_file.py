"""An affect file exactly as schema v1 wrote it, built with migration 1 alone.

No v1 store code remains, so :class:`V1Writer` runs the statements v1's
``SqliteAffectStore`` ran, in one transaction per call: ``put`` appends each key's
next revision to ``affect_history`` and upserts the same record into
``affect_current``, changes ``affect_scope`` only when a key's scope changed, and
records a ledger entry; ``delete`` erases a key's rows from all three tables.

:func:`v1_view` reads such a file the way v1 answered ``get``, ``history`` and
``list`` (from its raw rows), so a test can hold an upgraded file to it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import apsw

from bifrost.idempotency import idempotency_id, request_digest
from bifrost.records import canonical_record
from bifrost.timestamps import rfc3339
from ratatoskr.affect.schema import LEDGER, MIGRATIONS, PLANE
from ratatoskr.sqlite import Database, codec

ACTOR = "agent-1"


def open_v1(path: str) -> Database:
    """The file at ``path`` opened (created) at schema v1."""
    return Database(path, plane=PLANE, migrations=MIGRATIONS[:1])


def _json(value: Any) -> str:
    return canonical_record(value)[0].decode("utf-8")


class V1Writer:
    """v1's write statements over a file at schema v1."""

    def __init__(self, path: str, *, start: float = 1_800_000_000.0) -> None:
        self.db = open_v1(path)
        self.now = start

    def put(self, records: Sequence[dict[str, Any]], idempotency_key: str | None = None) -> None:
        self.now += 0.25
        stamp = rfc3339(self.now)
        with self.db.write() as conn:
            marks = ",".join("?" * len(records))
            heads = {
                str(k): (int(r), str(s))
                for k, r, s in conn.execute(
                    f"SELECT key, revision, scope_json FROM affect_current WHERE key IN ({marks})",
                    [rec["key"] for rec in records],
                )
            }
            for rec in records:
                key, text, scope_json = rec["key"], _json(rec), _json(rec["scope"])
                old = heads.get(key)
                revision = old[0] + 1 if old else 1
                conn.execute(
                    "INSERT INTO affect_history (key, revision, record_json, recorded_at)"
                    " VALUES (?, ?, ?, ?)",
                    (key, revision, text, stamp),
                )
                conn.execute(
                    "INSERT INTO affect_current (key, record_json, scope_json, revision,"
                    " recorded_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET"
                    " record_json = excluded.record_json, scope_json = excluded.scope_json,"
                    " revision = excluded.revision, recorded_at = excluded.recorded_at",
                    (key, text, scope_json, revision, stamp),
                )
                if old is None or old[1] != scope_json:
                    if old is not None:
                        conn.executemany(
                            "DELETE FROM affect_scope WHERE axis = ? AND value = ? AND key = ?",
                            [(a, v, key) for a, v in codec.loads(old[1]).items()],
                        )
                    conn.executemany(
                        "INSERT INTO affect_scope (axis, value, key) VALUES (?, ?, ?)",
                        [(a, v, key) for a, v in rec["scope"].items()],
                    )
            if idempotency_key is not None:
                LEDGER.record(
                    conn,
                    idempotency_id("put_many", ACTOR, idempotency_key),
                    digest=request_digest(list(records), None),
                    result={"written": len(records), "replayed": False},
                    expires_at=sys.float_info.max,
                )

    def delete(self, keys: Sequence[str]) -> None:
        with self.db.write() as conn:
            for key in keys:
                rows = conn.execute(
                    "SELECT scope_json FROM affect_current WHERE key = ?", (key,)
                ).fetchall()
                if not rows:
                    continue
                conn.execute("DELETE FROM affect_history WHERE key = ?", (key,))
                conn.execute("DELETE FROM affect_current WHERE key = ?", (key,))
                conn.executemany(
                    "DELETE FROM affect_scope WHERE axis = ? AND value = ? AND key = ?",
                    [(a, v, key) for a, v in codec.loads(str(rows[0][0])).items()],
                )

    def close(self) -> None:
        self.db.close()


def v1_view(path: str) -> dict[str, Any]:
    """What v1 answered for the file at ``path``: ``current`` (key → the ``get``
    result), ``history`` (key → every revision, newest first), ``keys`` (``list``
    order) and ``scope`` (the index rows, sorted)."""
    conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        current = {
            str(k): {**codec.loads(str(rj)), "revision": int(rev), "recorded_at": str(at)}
            for k, rj, rev, at in conn.execute(
                "SELECT key, record_json, revision, recorded_at FROM affect_current"
            )
        }
        history: dict[str, list[dict[str, Any]]] = {}
        for k, rj, rev, at in conn.execute(
            "SELECT key, record_json, revision, recorded_at FROM affect_history"
            " ORDER BY key, revision DESC"
        ):
            history.setdefault(str(k), []).append(
                {**codec.loads(str(rj)), "revision": int(rev), "recorded_at": str(at)}
            )
        keys = [str(r[0]) for r in conn.execute("SELECT key FROM affect_current ORDER BY key")]
        scope = sorted(
            (str(a), str(v), str(k))
            for a, v, k in conn.execute("SELECT axis, value, key FROM affect_scope")
        )
        return {"current": current, "history": history, "keys": keys, "scope": scope}
    finally:
        conn.close()
