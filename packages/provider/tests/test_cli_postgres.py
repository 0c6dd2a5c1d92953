"""``stats``, ``doctor`` and ``compact`` of planes served from PostgreSQL (issue 27 item
1), through ``cli.main`` in-process against a fresh database on the session's throwaway
pgvector server."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from bifrost.context import DispatchContext
from ratatoskr.provider import cli
from ratatoskr.provider.preflight import open_planes
from ratatoskr.provider.settings import Settings

from .conftest import KEY


@pytest.fixture(scope="module")
def dsn(pg_server: str) -> Iterator[str]:
    """A fresh database on the session's PostgreSQL server (the root conftest's)."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    parts = urlsplit(pg_server)
    yield urlunsplit(("postgresql", parts.netloc, f"/{name}", parts.query, ""))
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture
def run(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Any:
    for name in [n for n in os.environ if n.startswith("RATATOSKR_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RATATOSKR_MEMORY_DB", dsn)
    monkeypatch.setenv("RATATOSKR_AFFECT_DB", dsn)
    monkeypatch.setenv("RATATOSKR_MEMORY_EMBEDDING_DIM", "8")
    monkeypatch.setenv("RATATOSKR_HEIMDALL_KEY", KEY)

    def main(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        status = cli.main(list(argv))
        out, err = capsys.readouterr()
        return status, out, err

    return main


def _seed(dsn: str, tmp_path: Path) -> None:
    settings = Settings(memory_db=dsn, affect_db=dsn, memory_embedding_dim=8, heimdall_key=KEY)
    opened = open_planes(settings, ("memory", "affect"))
    try:
        memory = opened.served["memory"].store
        records = [
            {"id": f"c{i}", "embedding": [float(i % 5) + 0.5] * 8, "scope": {"tenant": "t"}}
            for i in range(30)
        ]
        memory.upsert_many(records, idempotency_key="k", ctx=DispatchContext(actor="a"))
        memory.delete_many([f"c{i}" for i in range(10)])
    finally:
        opened.close()


def test_stats_doctor_compact_on_postgres(run: Any, dsn: str, tmp_path: Path) -> None:
    status, out, err = run("compact", "--plane", "memory")
    assert status == 2 and "schema ratatoskr_memory does not exist yet" in err, (out, err)
    _seed(dsn, tmp_path)

    status, out, err = run("stats", "--plane", "memory", "--json")
    assert status == 0, err
    memory = json.loads(out)["planes"]["memory"]
    assert memory["exists"] is True and memory["postgresql"] is True
    assert memory["schema"] == "ratatoskr_memory" and memory["schema_version"] >= 1
    assert memory["tables"]["memory_chunks"]["rows"] == 20
    assert memory["total_bytes"] > 0
    assert "password" not in out

    status, out, err = run("stats", "--plane", "memory")
    assert status == 0, err
    assert "(schema ratatoskr_memory)" in out and "memory_chunks" in out

    status, out, err = run("doctor", "--plane", "memory")
    assert status == 0, out
    line = next(x for x in out.splitlines() if x.startswith("memory db"))
    assert "server reachable" in line and "pgvector" in line and "schema v" in line

    status, out, err = run("compact", "--plane", "memory")
    assert status == 0, err
    assert out.startswith("ratatoskr: memory: VACUUM (ANALYZE) of ")
    assert "tables in schema ratatoskr_memory" in out and len(out.splitlines()) == 1
    status, out, err = run("compact", "--plane", "affect")
    assert status == 0 and out.startswith("ratatoskr: affect: VACUUM (ANALYZE) of "), err


def test_an_unreachable_server_is_one_line_without_the_password(
    run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = "postgresql://ratatoskr:s3cret@127.0.0.1:1/app?connect_timeout=1"
    monkeypatch.setenv("RATATOSKR_MEMORY_DB", dead)
    status, out, err = run("compact", "--plane", "memory")
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("ratatoskr: RATATOSKR_MEMORY_DB: postgresql://ratatoskr:***@")
    status, out, err = run("stats", "--plane", "memory")
    assert status == 1 and "s3cret" not in out + err
