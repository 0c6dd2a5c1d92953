"""What an erasure leaves in a PostgreSQL server's files, measured (docs/privacy.md).

Sentinel records (a chunk and an affect key with its history, their id, content,
payload, end user and tenant all distinctive strings) are written through the stores,
erased with ``ratatoskr forget`` as an operator runs it, and the server's data
directory is searched byte for byte — ``base/`` (tables and indexes) and ``pg_wal/``
— after each step, each step followed by a ``CHECKPOINT`` (so what the server holds
in memory is in the files). What the test holds, and the document says:

- after the delete (``forget``): the rows are dead tuples, every sentinel still in
  ``base/``;
- after ``VACUUM``: still in ``base/`` (the space is marked free, not overwritten);
- after ``forget --vacuum-full``: no sentinel in ``base/`` (the tables are rewritten
  into new files; the old ones are cut to zero at commit);
- in ``pg_wal/`` at every step: the write's WAL records stay until the segment is
  recycled and overwritten.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from bifrost.context import DispatchContext
from ratatoskr.affect.postgres import open_postgres_affect_store
from ratatoskr.memory.postgres import open_postgres_memory_store
from ratatoskr.provider import pgoperate
from ratatoskr.provider.pgoperate import (
    SNAPSHOT_KEPT,
    STATISTICS_BUSY,
    STATISTICS_KEPT,
    TABLES_KEPT,
)

from .conftest import KEY
from .test_postgres_provider import database, pg_dsn  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow
CTX = DispatchContext(actor="agent", scope={})
USER = "pg-sentinel-user-4c1d"
TENANT = "pg-sentinel-tenant-8e27"
SENTINELS = {
    "chunk id": b"pg-sentinel-chunk-0b5e",
    "content": b"PG-SENTINEL-CONTENT-77af",
    "end user": USER.encode(),
    "tenant": TENANT.encode(),
    "affect key": b"pg-sentinel-mood-key-19c4",
    "affect payload": b"PG-SENTINEL-MOOD-d03a",
}


RunCli = Callable[..., subprocess.CompletedProcess[str]]


def found_in(data_dir: Path, area: str) -> set[str]:
    """The sentinels found in any file under ``data_dir/area``."""
    out: set[str] = set()
    for root, _dirs, files in os.walk(data_dir / area):
        for name in files:
            try:
                data = (Path(root) / name).read_bytes()
            except OSError:  # a file removed while walking
                continue
            out |= {what for what, needle in SENTINELS.items() if needle in data}
    return out


def seed(dsn: str) -> None:
    memory = open_postgres_memory_store(dsn, embedding_dim=8)
    fillers = [
        {
            "id": f"filler-{i:04d}",
            "embedding": [0.1 * (i % 9) + 0.01, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8],
            "scope": {"tenant": "other", "end_user": f"u{i % 5}"},
            "content": f"filler {i}",
        }
        for i in range(500)
    ]
    memory.upsert_many(fillers, idempotency_key="fill", ctx=CTX)
    sentinel = {
        "id": SENTINELS["chunk id"].decode(),
        "embedding": [0.9, -0.1, 0.2, 0.3, -0.4, 0.5, 0.6, 0.7],
        "scope": {"tenant": TENANT, "end_user": USER},
        "content": SENTINELS["content"].decode(),
    }
    memory.upsert_many([sentinel], idempotency_key="sentinel", ctx=CTX)
    memory.close()
    affect = open_postgres_affect_store(dsn)
    for rev in range(3):
        record = {
            "key": SENTINELS["affect key"].decode(),
            "scope": {"tenant": TENANT, "end_user": USER},
            "mood": SENTINELS["affect payload"].decode(),
            "n": rev,
        }
        affect.put_many([record], idempotency_key=f"mood-{rev}", ctx=CTX)
    affect.close()


def test_what_an_erasure_leaves_in_the_postgres_files(
    ratatoskr_cli: RunCli,
    database: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    env = {
        "RATATOSKR_MEMORY_DB": database,
        "RATATOSKR_AFFECT_DB": database,
        "RATATOSKR_MEMORY_EMBEDDING_DIM": "8",
        "RATATOSKR_HEIMDALL_KEY": KEY,
    }
    seed(database)
    with psycopg.connect(database, autocommit=True) as conn:
        # The planner's statistics sample the rows (ids, scope values, records) into
        # pg_statistic whenever ANALYZE runs: autovacuum's did at no predictable time, and
        # the test passed only when it had not. Now always.
        conn.execute("ANALYZE")
        row = conn.execute("SHOW data_directory").fetchone()
        assert row is not None
        data_dir = Path(str(row[0]))

        def step() -> dict[str, set[str]]:
            conn.execute("CHECKPOINT")
            return {area: found_in(data_dir, area) for area in ("base", "pg_wal")}

        written = step()
        assert written["base"] == set(SENTINELS)  # every sentinel is on disk: the checks can fail
        assert written["pg_wal"] == set(SENTINELS)

        scope = json.dumps({"end_user": USER})
        done = ratatoskr_cli(["forget", "--scope", scope], env, tmp_path)
        assert done.returncode == 0, done.stderr
        assert "memory: erased 1 chunks" in done.stdout and "affect: erased 1 keys" in done.stdout
        deleted = step()
        assert deleted["base"] == set(SENTINELS)  # dead tuples
        assert deleted["pg_wal"] == set(SENTINELS)

        for schema in ("ratatoskr_memory", "ratatoskr_affect"):
            tables = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
            ).fetchall()
            for (name,) in tables:
                conn.execute(
                    psycopg.sql.SQL("VACUUM {}").format(psycopg.sql.Identifier(schema, name))
                )
        vacuumed = step()
        # Free space, not overwritten: the chunk's page, shared with 500 others, keeps
        # it. (The affect history's pages held the sentinel's rows alone: VACUUM cut the
        # emptied pages off the table's end, and the payload with them.)
        assert {"chunk id", "content", "end user", "tenant", "affect key"} <= vacuumed["base"]
        print("after VACUUM, base/ holds:", sorted(vacuumed["base"]))
        assert vacuumed["pg_wal"] == set(SENTINELS)

        full = ratatoskr_cli(["forget", "--scope", scope, "--vacuum-full"], env, tmp_path)
        assert full.returncode == 0, full.stderr
        assert "memory: erased 0 chunks" in full.stdout
        assert STATISTICS_KEPT not in full.stdout  # a superuser: pg_statistic rewritten
        rewritten = step()
        assert rewritten["base"] == set()  # the tables' new files hold none of it
        assert rewritten["pg_wal"] == set(SENTINELS)  # until the segments are recycled
        print("after VACUUM FULL, pg_wal/ holds:", sorted(rewritten["pg_wal"]))


def test_a_role_that_may_not_rewrite_the_statistics_is_told(
    ratatoskr_cli: RunCli,
    database: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """``forget --vacuum-full`` by the planes' owner, not a superuser: the tables are
    rewritten, the statistics' sampled values stay in the files, and the command says
    so for each plane."""
    seed(database)
    role = f"eraser_{os.urandom(4).hex()}"
    owner = psycopg.sql.Identifier(role)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE ROLE {} LOGIN").format(owner))
        for schema in ("ratatoskr_memory", "ratatoskr_affect"):
            conn.execute(
                psycopg.sql.SQL("ALTER SCHEMA {} OWNER TO {}").format(
                    psycopg.sql.Identifier(schema), owner
                )
            )
            for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
            ).fetchall():
                conn.execute(
                    psycopg.sql.SQL("ALTER TABLE {} OWNER TO {}").format(
                        psycopg.sql.Identifier(schema, name), owner
                    )
                )
        conn.execute("ANALYZE")
        row = conn.execute("SHOW data_directory").fetchone()
        assert row is not None
        data_dir = Path(str(row[0]))
        parts = urlsplit(database)
        host = parts.netloc.split("@", 1)[-1]
        as_role = urlunsplit((parts.scheme, f"{role}@{host}", parts.path, parts.query, ""))
        env = {
            "RATATOSKR_MEMORY_DB": as_role,
            "RATATOSKR_AFFECT_DB": as_role,
            "RATATOSKR_MEMORY_EMBEDDING_DIM": "8",
            "RATATOSKR_HEIMDALL_KEY": KEY,
        }
        scope = json.dumps({"end_user": USER})
        try:
            done = ratatoskr_cli(["forget", "--scope", scope, "--vacuum-full"], env, tmp_path)
            assert done.returncode == 0, done.stderr
            assert "memory: erased 1 chunks" in done.stdout
            assert f"memory: {STATISTICS_KEPT}" in done.stdout
            assert f"affect: {STATISTICS_KEPT}" in done.stdout
            assert role not in done.stdout + done.stderr
            conn.execute("CHECKPOINT")
            # The tables were rewritten; the statistics of the emptied ones still hold them.
            assert found_in(data_dir, "base") != set()
        finally:
            conn.execute(psycopg.sql.SQL("REASSIGN OWNED BY {} TO CURRENT_USER").format(owner))
            conn.execute(psycopg.sql.SQL("DROP OWNED BY {}").format(owner))


def _as_role(dsn: str, role: str) -> str:
    parts = urlsplit(dsn)
    host = parts.netloc.split("@", 1)[-1]
    return urlunsplit((parts.scheme, f"{role}@{host}", parts.path, parts.query, ""))


def _env(dsn: str) -> dict[str, str]:
    return {
        "RATATOSKR_MEMORY_DB": dsn,
        "RATATOSKR_AFFECT_DB": dsn,
        "RATATOSKR_MEMORY_EMBEDDING_DIM": "8",
        "RATATOSKR_HEIMDALL_KEY": KEY,
    }


def test_a_role_that_may_not_rewrite_the_tables_is_told_so(
    ratatoskr_cli: RunCli,
    database: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Rows and grants but not the tables: PostgreSQL would skip each VACUUM FULL with a
    warning; forget erases and says the tables were not rewritten."""
    seed(database)
    role = f"writer_{os.urandom(4).hex()}"
    who = psycopg.sql.Identifier(role)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE ROLE {} LOGIN").format(who))
        try:
            for schema in ("ratatoskr_memory", "ratatoskr_affect"):
                name = psycopg.sql.Identifier(schema)
                conn.execute(psycopg.sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(name, who))
                conn.execute(
                    psycopg.sql.SQL(
                        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {} TO {}"
                    ).format(name, who)
                )
            scope = json.dumps({"end_user": USER})
            done = ratatoskr_cli(
                ["forget", "--scope", scope, "--vacuum-full"],
                _env(_as_role(database, role)),
                tmp_path,
            )
            assert done.returncode == 0, done.stderr
            assert "memory: erased 1 chunks" in done.stdout
            assert f"memory: {TABLES_KEPT}" in done.stdout
            assert f"affect: {TABLES_KEPT}" in done.stdout
        finally:
            conn.execute(psycopg.sql.SQL("DROP OWNED BY {}").format(who))


def test_a_session_holding_an_older_snapshot_is_named_as_what_keeps_rows(
    ratatoskr_cli: RunCli,
    database: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    seed(database)
    scope = json.dumps({"end_user": USER})
    with psycopg.connect(database) as reader:  # an export, a pg_dump, a long report
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT count(*) FROM pg_class").fetchall()
        done = ratatoskr_cli(
            ["forget", "--scope", scope, "--vacuum-full"], _env(database), tmp_path
        )
        reader.rollback()
    assert done.returncode == 0, done.stderr
    assert f"memory: {SNAPSHOT_KEPT}" in done.stdout and f"affect: {SNAPSHOT_KEPT}" in done.stdout


def test_busy_statistics_are_not_waited_on_without_bound(
    ratatoskr_cli: RunCli,
    database: str,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every query planned in the database reads pg_statistic: its rewrite waits at most
    the lock timeout behind a session that holds it, then says it was skipped."""
    monkeypatch.setattr(pgoperate, "STATISTICS_LOCK_TIMEOUT", "300ms")
    seed(database)
    scope = json.dumps({"end_user": USER})
    with psycopg.connect(database) as reader:
        reader.execute("SELECT count(*) FROM pg_stats").fetchall()  # holds its lock
        done = ratatoskr_cli(
            ["forget", "--scope", scope, "--vacuum-full"], _env(database), tmp_path
        )
        reader.rollback()
    assert done.returncode == 0, done.stderr
    assert f"memory: {STATISTICS_BUSY}" in done.stdout
