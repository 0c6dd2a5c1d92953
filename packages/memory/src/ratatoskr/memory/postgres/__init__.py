"""The memory plane on PostgreSQL + pgvector: the same protocol, contract and
conformance kit as the SQLite store (``ratatoskr.memory.store``), on the shared
PostgreSQL machinery of ``ratatoskr.postgres`` (pool, migrations, ledger, errors).

Imported on its own (``from ratatoskr.memory.postgres import …``) so that the
embedded SQLite default never imports the PostgreSQL driver.
"""

from ratatoskr.memory.postgres.store import PostgresMemoryStore, open_postgres_memory_store

__all__ = ["PostgresMemoryStore", "open_postgres_memory_store"]
