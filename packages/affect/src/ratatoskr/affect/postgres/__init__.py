"""The affect plane on PostgreSQL: the same protocol, contract and conformance
kit as the SQLite store (``ratatoskr.affect.store``), on the shared PostgreSQL
machinery of ``ratatoskr.postgres`` (pool, migrations, ledger, errors).

Imported on its own (``from ratatoskr.affect.postgres import …``) so that the
embedded SQLite default never imports the PostgreSQL driver.
"""

from ratatoskr.affect.postgres.store import PostgresAffectStore, open_postgres_affect_store

__all__ = ["PostgresAffectStore", "open_postgres_affect_store"]
