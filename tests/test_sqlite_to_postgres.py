"""Moving a deployment from SQLite to PostgreSQL: ``ratatoskr export`` from the SQLite
planes, ``ratatoskr import`` with the DSN configured, and the export of the
destination equals the source's line for line (the header's time aside); a second
import changes nothing. Commands run as a user runs them, in this process (the root
conftest's ``ratatoskr_cli``)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from bifrost.context import DispatchContext
from ratatoskr.affect import open_affect_store
from ratatoskr.memory import open_memory_store

from .conftest import KEY
from .test_postgres_provider import database, pg_dsn  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow
CTX = DispatchContext(actor="agent", scope={})


RunCli = Callable[..., subprocess.CompletedProcess[str]]


def test_sqlite_to_postgres_and_back_line_for_line(
    ratatoskr_cli: RunCli,
    database: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    sqlite_env = {
        "RATATOSKR_MEMORY_DB": str(tmp_path / "memory.db"),
        "RATATOSKR_AFFECT_DB": str(tmp_path / "affect.db"),
        "RATATOSKR_MEMORY_EMBEDDING_DIM": "4",
        "RATATOSKR_HEIMDALL_KEY": KEY,
        "RATATOSKR_MAX_BATCH": "9",
    }
    memory = open_memory_store(sqlite_env["RATATOSKR_MEMORY_DB"], embedding_dim=4)
    records = [
        {
            "id": f"c\u0000{i:02d}" if i == 7 else f"c{i:02d}",
            "embedding": [1, 2, 3, 4] if i % 4 == 0 else [0.25, -0.0, 5e-324, float(i + 1)],
            "scope": {"tenant": f"t{i % 2}", "end_user": f"u{i % 3}"},
            "n": i,
            "f": 2.0,
            "big": -(2**80),
        }
        for i in range(40)
    ]
    for round_ in range(3):
        memory.upsert_many(records[: 40 - 10 * round_], idempotency_key=f"m{round_}", ctx=CTX)
    memory.delete_many(["c39"])
    memory.close()
    affect = open_affect_store(sqlite_env["RATATOSKR_AFFECT_DB"])
    for round_ in range(4):
        affect.put_many(
            [
                {"key": f"k{i}", "scope": {"tenant": f"t{(i + round_) % 2}"}, "v": [round_, 1.5]}
                for i in range(round_, 12)
            ],
            idempotency_key=f"a{round_}",
            ctx=CTX,
        )
    affect.close()
    pg_env = {**sqlite_env, "RATATOSKR_MEMORY_DB": database, "RATATOSKR_AFFECT_DB": database}
    for plane in ("memory", "affect"):
        source, again = tmp_path / f"{plane}.jsonl", tmp_path / f"{plane}.pg.jsonl"
        done = ratatoskr_cli(
            ["export", "--plane", plane, "--to", str(source)], sqlite_env, tmp_path
        )
        assert done.returncode == 0, done.stderr
        done = ratatoskr_cli(["import", "--plane", plane, "--from", str(source)], pg_env, tmp_path)
        assert done.returncode == 0, done.stderr
        done = ratatoskr_cli(["export", "--plane", plane, "--to", str(again)], pg_env, tmp_path)
        assert done.returncode == 0, done.stderr
        a, b = source.read_text().splitlines(), again.read_text().splitlines()
        assert len(a) == (40 if plane == "memory" else 13)
        assert a[1:] == b[1:]
        head_a, head_b = json.loads(a[0]), json.loads(b[0])
        head_a.pop("exported_at"), head_b.pop("exported_at")
        assert head_a == head_b
        # Idempotent: a second import into PostgreSQL skips every record.
        done = ratatoskr_cli(["import", "--plane", plane, "--from", str(source)], pg_env, tmp_path)
        assert done.returncode == 0, done.stderr
        assert " 0 new" in done.stderr and " 0 replaced" in done.stderr
        # And back to a fresh SQLite file: the same lines again.
        back_env = {
            **sqlite_env,
            "RATATOSKR_MEMORY_DB": str(tmp_path / "back-memory.db"),
            "RATATOSKR_AFFECT_DB": str(tmp_path / "back-affect.db"),
        }
        done = ratatoskr_cli(["import", "--plane", plane, "--from", str(again)], back_env, tmp_path)
        assert done.returncode == 0, done.stderr
        back = tmp_path / f"{plane}.back.jsonl"
        done = ratatoskr_cli(["export", "--plane", plane, "--to", str(back)], back_env, tmp_path)
        assert back.read_text().splitlines()[1:] == a[1:]
    # Tenants' usage (bifrost.quota) counts the imported records as the writes had:
    # the PostgreSQL usage tables equal the SQLite ones the source's upserts kept.
    for plane in ("memory", "affect"):
        table = f"{plane}_quota"
        lite = sqlite3.connect(sqlite_env[f"RATATOSKR_{plane.upper()}_DB"])
        try:
            want = sorted(lite.execute(f"SELECT tenant, items, bytes FROM {table}").fetchall())
        finally:
            lite.close()
        with psycopg.connect(database) as conn:
            got = conn.execute(
                sql.SQL("SELECT tenant, items, bytes FROM {}.{}").format(
                    sql.Identifier(f"ratatoskr_{plane}"), sql.Identifier(table)
                )
            ).fetchall()
        assert sorted((str(t), int(i), int(b)) for t, i, b in got) == want
        assert want
    # A scoped export reads the same records from either backend.
    scope = '{"tenant": "t1", "end_user": "u2"}'
    for plane in ("memory", "affect"):
        lines = []
        for env in (sqlite_env, pg_env):
            done = ratatoskr_cli(
                ["export", "--plane", plane, "--scope", scope, "--to", "-"], env, tmp_path
            )
            assert done.returncode == 0, done.stderr
            lines.append(done.stdout.splitlines()[1:])
        assert lines[0] == lines[1]
