"""Per-tenant usage of a SQLite plane, kept by triggers (bifrost's ``bifrost.quota``
decides on it).

A plane whose records live one row each in a table with a ``scope_json`` column and
a bytes column (memory: ``memory_chunks.record_bytes``; affect:
``affect_current.history_bytes``) gets a usage table ``(tenant, items, bytes)``
and three triggers on the records' table that keep it equal to
``SELECT tenant, count(*), sum(bytes) ... GROUP BY tenant`` — whatever writes the
rows: a write, a delete, a migration. A row without a tenant counts under
:data:`NO_TENANT` (``''``, bifrost's name for that bucket); a tenant whose last row goes loses its
usage row too (an erased tenant leaves no trace).

The usage is read inside the write's transaction, after its rows are written
(:meth:`TenantUsageTable.read`): ``BEGIN IMMEDIATE`` already serialises writers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import apsw

__all__ = ["NO_TENANT", "TenantUsageTable"]

NO_TENANT = ""

_SQL_CHUNK = 500


@dataclass(frozen=True)
class TenantUsageTable:
    """The usage table ``table`` of the records in ``rows`` (one row each, a
    ``scope_json`` column and the integer column ``bytes_column``)."""

    table: str
    rows: str
    bytes_column: str

    def _tenant(self, alias: str) -> str:
        return f"coalesce(json_extract({alias}.scope_json, '$.tenant'), '{NO_TENANT}')"

    def _add(self, alias: str, sign: str) -> str:
        return (
            f"INSERT INTO {self.table} (tenant, items, bytes)"
            f" VALUES ({self._tenant(alias)}, {sign}1, {sign}{alias}.{self.bytes_column})"
            " ON CONFLICT (tenant) DO UPDATE SET items = items + excluded.items,"
            " bytes = bytes + excluded.bytes;"
        )

    def _drop_empty(self, alias: str) -> str:
        return f"DELETE FROM {self.table} WHERE tenant = {self._tenant(alias)} AND items = 0;"

    def create_sql(self) -> str:
        """The table and its triggers, filled from the rows already there (one
        migration: the backfill and the triggers commit together)."""
        t, r = self.table, self.rows
        return (
            f"CREATE TABLE {t} (tenant TEXT PRIMARY KEY, items INTEGER NOT NULL,"
            " bytes INTEGER NOT NULL) WITHOUT ROWID;"
            f"INSERT INTO {t} (tenant, items, bytes)"
            f" SELECT {self._tenant(r)}, count(*), coalesce(sum({self.bytes_column}), 0)"
            f" FROM {r} GROUP BY 1;"
            f"CREATE TRIGGER {t}_insert AFTER INSERT ON {r} BEGIN {self._add('NEW', '')} END;"
            f"CREATE TRIGGER {t}_delete AFTER DELETE ON {r} BEGIN"
            f" {self._add('OLD', '-')} {self._drop_empty('OLD')} END;"
            # Only when the tenant or the bytes may have changed.
            f"CREATE TRIGGER {t}_update AFTER UPDATE OF scope_json, {self.bytes_column} ON {r}"
            f" BEGIN {self._add('OLD', '-')} {self._add('NEW', '')} {self._drop_empty('OLD')} END;"
        )

    def read(self, conn: apsw.Connection, tenants: Sequence[str]) -> dict[str, tuple[int, int]]:
        """``(items, bytes)`` of each of ``tenants`` (one without rows: absent)."""
        out: dict[str, tuple[int, int]] = {}
        for start in range(0, len(tenants), _SQL_CHUNK):
            part = tuple(tenants[start : start + _SQL_CHUNK])
            for tenant, items, nbytes in conn.execute(
                f"SELECT tenant, items, bytes FROM {self.table}"
                f" WHERE tenant IN ({','.join('?' * len(part))})",
                part,
            ):
                out[str(tenant)] = (int(items), int(nbytes))
        return out
