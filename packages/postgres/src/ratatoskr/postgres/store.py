"""``SchemaStore``: what every plane's PostgreSQL store is built on.

A store holds the database of its schema (``PostgresDatabase``: the pool and the
schema's tables), the plane's ledger and usage table (:class:`PlaneTables`) and
the clock the conformance kit drives.
It writes through :func:`~ratatoskr.postgres.writes.run_write` (bifrost's one
write path in one transaction), answers ``health`` with a round trip, and closes
the pool if it opened it. The plane's store adds only its SQL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bifrost.quota import NO_QUOTA, Quota
from bifrost.writes import WriteRequest
from ratatoskr.postgres.database import PostgresDatabase
from ratatoskr.postgres.ledger import PostgresLedger
from ratatoskr.postgres.quota import TenantUsageTable
from ratatoskr.postgres.writes import Perform, run_write

__all__ = ["PlaneTables", "SchemaStore"]

_PING_WAIT = 1.0


@dataclass(frozen=True)
class PlaneTables:
    """The tables every plane's schema holds beside its own: the idempotency ledger
    ``ledger``, and the per-tenant usage table ``usage`` of the rows of ``rows``
    (whose integer column ``row_bytes`` is each row's share, see ``quota.py``)."""

    ledger: str
    usage: str
    rows: str
    row_bytes: str

    def ledger_in(self, schema: str) -> PostgresLedger:
        return PostgresLedger.in_schema(schema, self.ledger)

    def usage_in(self, schema: str) -> TenantUsageTable:
        return TenantUsageTable(schema, self.usage, self.rows, self.row_bytes)


class SchemaStore:
    """The database, ledger and clock of one plane's schema (see the module docstring)."""

    def __init__(
        self,
        db: PostgresDatabase,
        tables: PlaneTables,
        clock: Callable[[], float],
        quota: Quota = NO_QUOTA,
    ) -> None:
        self._db = db
        self._ledger = tables.ledger_in(db.schema)
        self._clock = clock
        # The per-tenant quota, decided on the plane's usage table in each write.
        self.quota = quota
        self._usage = tables.usage_in(db.schema)

    @property
    def database(self) -> PostgresDatabase:
        return self._db

    def close(self) -> None:
        """Close the pool if the store opened it; idempotent. Later calls raise
        StorageUnavailable."""
        self._db.close()

    def _ping(self) -> None:
        """One round trip to the server, waiting at most a second for a connection (a
        probe answers quickly); StorageError subclasses when it cannot be reached."""
        self._db.run(lambda cur: cur.execute(b"SELECT 1").fetchall(), wait=_PING_WAIT)

    def _write(self, request: WriteRequest[Any], actor: str, perform: Perform) -> dict[str, Any]:
        """``request`` for ``actor`` exactly once, ``perform`` being the store's SQL."""
        return run_write(
            self._db,
            self._ledger,
            request,
            actor=actor,
            clock=self._clock,
            perform=perform,
            quota=self.quota,
            usage=self._usage,
        )
