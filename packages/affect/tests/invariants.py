"""What must hold in an affect file at the newest schema, checked on its raw rows."""

from __future__ import annotations

import json

import apsw


def _one(conn: apsw.Connection, sql: str) -> int:
    return int(conn.execute(sql).fetchall()[0][0])  # type: ignore[arg-type]


def check_affect_file(path: str) -> int:
    """Integrity; each current row points at its newest history row (``head``) and
    names its key by the id of its revision 1 (``key_id``, unique); every key has
    revisions 1…current and no other history exists; the scope index holds exactly
    the current scopes. Returns the number of live keys."""
    conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert (
            _one(
                conn,
                "SELECT count(*) FROM affect_current AS c LEFT JOIN affect_history AS h"
                " ON h.id = c.head WHERE h.id IS NULL OR h.key_id IS NOT c.key_id"
                " OR h.revision IS NOT c.revision",
            )
            == 0
        ), "a current row that does not point at its newest revision"
        assert (
            _one(
                conn,
                "SELECT count(*) FROM affect_current AS c LEFT JOIN affect_history AS h"
                " ON h.key_id = c.key_id AND h.revision = 1 WHERE h.id IS NOT c.key_id",
            )
            == 0
        ), "a key_id that is not the id of the key's revision 1"
        assert _one(conn, "SELECT count(*) - count(DISTINCT key_id) FROM affect_current") == 0
        assert (
            _one(
                conn,
                "SELECT count(*) FROM affect_current AS c LEFT JOIN"
                " (SELECT key_id, max(revision) AS top, count(*) AS n FROM affect_history"
                " GROUP BY key_id) AS h ON h.key_id = c.key_id"
                " WHERE h.top IS NOT c.revision OR h.n IS NOT c.revision",
            )
            == 0
        ), "a key whose history is not revisions 1…current"
        assert (
            _one(
                conn,
                "SELECT count(*) FROM (SELECT DISTINCT key_id FROM affect_history"
                " EXCEPT SELECT key_id FROM affect_current)",
            )
            == 0
        ), "history of no live key"
        index = {
            (str(a), str(v), str(k))
            for a, v, k in conn.execute("SELECT axis, value, key FROM affect_scope")
        }
        derived = {
            (axis, value, str(key))
            for key, scope_json in conn.execute("SELECT key, scope_json FROM affect_current")
            for axis, value in json.loads(str(scope_json)).items()
        }
        assert index == derived, "scope index disagrees with the current scopes"
        return _one(conn, "SELECT count(*) FROM affect_current")
    finally:
        conn.close()
