"""Both backends behind one description, for the store-level suites that run on each.

A :class:`Place` says where a store lives — a SQLite file, or a schema on a
PostgreSQL server — and opens the memory or affect store there, in this process
or (from ``argv()``) in a child process. :func:`dump` reads every row of every
table a store has, on either backend, so a test can say "nothing changed"
without naming tables.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import Cursor, sql

from ratatoskr.affect import SqliteAffectStore, open_affect_store
from ratatoskr.affect.postgres import PostgresAffectStore, open_postgres_affect_store
from ratatoskr.memory import SqliteMemoryStore, open_memory_store
from ratatoskr.memory.postgres import PostgresMemoryStore, open_postgres_memory_store
from ratatoskr.postgres import Pool

__all__ = ["BACKENDS", "AffectStore", "MemoryStore", "Place", "dump", "scratch_schema"]

BACKENDS = ("sqlite", "postgres")
MemoryStore = SqliteMemoryStore | PostgresMemoryStore
AffectStore = SqliteAffectStore | PostgresAffectStore
Rows = list[tuple[Any, ...]]


@dataclass(frozen=True)
class Place:
    """Where a store lives: ``backend`` ``sqlite`` (``target`` a file path) or
    ``postgres`` (``target`` a DSN, ``schema`` the store's schema)."""

    backend: str
    target: str
    schema: str = ""

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}")
        if self.backend == "postgres" and not self.schema:
            raise ValueError("a PostgreSQL place needs a schema")

    def argv(self) -> list[str]:
        """The place as command-line arguments (see :meth:`from_argv`)."""
        return [self.backend, self.target, self.schema or "-"]

    @classmethod
    def from_argv(cls, argv: list[str]) -> Place:
        backend, target, schema = argv[:3]
        return cls(backend, target, "" if schema == "-" else schema)

    def open_memory(
        self, *, embedding_dim: int, pool: Pool | None = None, **limits: Any
    ) -> MemoryStore:
        """The memory store here; on PostgreSQL on ``pool`` when given (shared, left
        open by ``close()``), else on a pool of its own."""
        if self.backend == "sqlite":
            return open_memory_store(self.target, embedding_dim=embedding_dim, **limits)
        return open_postgres_memory_store(
            pool or self.target, schema=self.schema, embedding_dim=embedding_dim, **limits
        )

    def open_affect(self, *, pool: Pool | None = None, **limits: Any) -> AffectStore:
        """The affect store here (``pool`` as for :meth:`open_memory`)."""
        if self.backend == "sqlite":
            return open_affect_store(self.target, **limits)
        return open_postgres_affect_store(pool or self.target, schema=self.schema, **limits)


def dump(store: MemoryStore | AffectStore) -> dict[str, Rows]:
    """Every row of every table of ``store``'s database, each table's rows sorted.

    SQLite: every ordinary table of the file (sqlite-vec's shadow tables included,
    so the vector index is compared too; the virtual table itself reads through
    them). PostgreSQL: every table of the store's schema.
    """
    if isinstance(store, PostgresMemoryStore | PostgresAffectStore):
        schema = store.database.schema

        def read(cur: Cursor[Any]) -> dict[str, Rows]:
            names = [
                str(r[0])
                for r in cur.execute(
                    "SELECT table_name FROM information_schema.tables"
                    " WHERE table_schema = %s AND table_type = 'BASE TABLE'",
                    (schema,),
                ).fetchall()
            ]
            out: dict[str, Rows] = {}
            for name in names:
                table = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(name))
                rows = cur.execute(sql.SQL("SELECT * FROM {}").format(table)).fetchall()
                out[name] = sorted((tuple(r) for r in rows), key=repr)
            return out

        return store.database.run(read, mode="snapshot")
    with store.database.read() as conn:
        names = [
            str(r[0])
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND sql NOT LIKE 'CREATE VIRTUAL TABLE%'"
            )
        ]
        return {
            name: sorted((tuple(r) for r in conn.execute(f'SELECT * FROM "{name}"')), key=repr)
            for name in names
        }


@contextmanager
def scratch_schema(dsn: str) -> Iterator[str]:
    """A fresh schema name on ``dsn``'s server for a longer-lived fixture than the
    conftest's ``new_schema`` (e.g. one module); the schema is dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    try:
        yield name
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
