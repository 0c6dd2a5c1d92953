"""Per-tenant usage of a PostgreSQL plane, kept by triggers (``bifrost.quota`` decides
on it, once, in :func:`ratatoskr.postgres.writes.run_write`).

A plane whose records live one row each in a table with the ``tenant`` scope column
and a bytes column (memory: ``memory_chunks.record_bytes``; affect:
``affect_current.history_bytes``) gets a usage table ``(tenant, items, bytes)`` and
three statement-level triggers on the records' table (insert, update, delete, each
with its transition tables) that add what a statement changed, grouped by tenant, in
tenant order — so the usage equals ``SELECT tenant, count(*), sum(bytes) … GROUP BY
tenant`` whatever writes the rows. A row without a tenant counts under ``''`` (bifrost's
``NO_TENANT``); a tenant whose last row goes loses its usage row.

Concurrency: a trigger's ``INSERT … ON CONFLICT DO UPDATE`` locks the usage rows of the
tenants its statement touched until the transaction ends, so writers to one tenant
take turns, and the usage a write then reads (:meth:`TenantUsageTable.read`, in the
same transaction) includes every committed write and its own. The locks are taken at
the end of the writing statement, after its record rows, in tenant order: two
writers cannot hold them crosswise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import Cursor, sql

from ratatoskr.postgres.migrations import qualified
from ratatoskr.postgres.text import from_db, to_db

__all__ = ["TenantUsageTable"]

_DELTA = {
    "insert": "SELECT coalesce(tenant, '') AS t, 1 AS i, {b} AS b FROM added",
    "delete": "SELECT coalesce(tenant, '') AS t, -1 AS i, -{b} AS b FROM removed",
    "update": "SELECT coalesce(tenant, '') AS t, 1 AS i, {b} AS b FROM added UNION ALL"
    " SELECT coalesce(tenant, ''), -1, -{b} FROM removed",
}
_REFERENCING = {
    "insert": "NEW TABLE AS added",
    "delete": "OLD TABLE AS removed",
    "update": "OLD TABLE AS removed NEW TABLE AS added",
}


@dataclass(frozen=True)
class TenantUsageTable:
    """The usage table ``table`` of the records in ``rows`` (both in ``schema``; the
    rows have the ``tenant`` column and the integer column ``bytes_column``)."""

    schema: str
    table: str
    rows: str
    bytes_column: str

    def _name(self, name: str) -> sql.Composed:
        return qualified(self.schema, name)

    def create(self, cur: Cursor[Any]) -> None:
        """Create the table, fill it from the rows already there, and add the triggers
        (in the caller's transaction: a migration)."""
        q, rows, b = (
            self._name(self.table),
            self._name(self.rows),
            sql.Identifier(self.bytes_column),
        )
        cur.execute(
            sql.SQL(
                'CREATE TABLE {q} (tenant text COLLATE "C" PRIMARY KEY,'
                " items bigint NOT NULL, bytes bigint NOT NULL);"
                " INSERT INTO {q} (tenant, items, bytes)"
                " SELECT coalesce(tenant, ''), count(*), coalesce(sum({b}), 0) FROM {rows}"
                " GROUP BY 1"
            ).format(q=q, rows=rows, b=b)
        )
        for event in ("insert", "delete", "update"):
            function = self._name(f"{self.table}_{event}")
            drop = (
                " DELETE FROM {q} WHERE items = 0"
                " AND tenant IN (SELECT coalesce(tenant, '') FROM removed);"
                if event != "insert"
                else ""
            )
            body = sql.SQL(
                "BEGIN INSERT INTO {q} AS q (tenant, items, bytes)"
                " SELECT d.t, sum(d.i), sum(d.b) FROM (" + _DELTA[event] + ") AS d"
                " GROUP BY d.t ORDER BY d.t"
                " ON CONFLICT (tenant) DO UPDATE SET items = q.items + EXCLUDED.items,"
                " bytes = q.bytes + EXCLUDED.bytes;" + drop + " RETURN NULL; END"
            ).format(q=q, b=b)
            cur.execute(
                sql.SQL(
                    "CREATE FUNCTION {f}() RETURNS trigger LANGUAGE plpgsql AS {body};"
                    " CREATE TRIGGER {trigger} AFTER {event} ON {rows}"
                    " REFERENCING {referencing} FOR EACH STATEMENT EXECUTE FUNCTION {f}()"
                ).format(
                    f=function,
                    body=sql.Literal(body.as_string(cur)),
                    trigger=sql.Identifier(f"{self.table}_{event}"),
                    event=sql.SQL(event.upper()),
                    rows=rows,
                    referencing=sql.SQL(_REFERENCING[event]),
                )
            )

    def read(self, cur: Cursor[Any], tenants: Sequence[str]) -> dict[str, tuple[int, int]]:
        """``(items, bytes)`` of each of ``tenants`` (one without rows: absent), in the
        caller's transaction."""
        if not tenants:
            return {}
        rows = cur.execute(
            sql.SQL("SELECT tenant, items, bytes FROM {q} WHERE tenant = ANY(%s)").format(
                q=self._name(self.table)
            ),
            ([to_db(t) for t in tenants],),
        ).fetchall()
        return {from_db(str(t)): (int(i), int(n)) for t, i, n in rows}
