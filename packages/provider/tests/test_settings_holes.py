"""Settings that used to open holes are refused at start, in one line naming the
setting, with nothing created or changed (each of these started on the old code)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import apsw
import pytest

from bifrost.context import DispatchContext
from ratatoskr.memory import open_memory_store
from ratatoskr.provider import preflight
from ratatoskr.provider.preflight import open_planes
from ratatoskr.provider.settings import ConfigError, Settings, unknown_variables
from ratatoskr.vmp import open_vmp_store

from .test_cli import Run, assert_refused, env, run, snapshot

__all__ = ["env", "run"]  # the fixtures, re-used


def test_a_sqlite_uri_is_refused(run: Run, tmp_path: Path, env: dict[str, str]) -> None:
    """`file:shared.db` once put two planes in one file and switched the deleted-file
    guard off."""
    for value in ("file:shared.db", "FILE:/tmp/x.db?cache=shared"):
        before = snapshot(tmp_path)
        result = run(["serve"], {**env, "RATATOSKR_MEMORY_DB": value}, tmp_path)
        assert_refused(result, "RATATOSKR_MEMORY_DB")
        assert "URI" in result.stderr
        assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("variable", "value", "needle"),
    [
        ("RATATOSKR_HEIMDALL_KEY", "Zq9", "at least 32"),
        ("RATATOSKR_HEIMDALL_KEY", "Zq9" * 10, "at least 32"),
        ("RATATOSKR_VMP_API_KEY", "Zq9-short-vmp", "at least 16"),
    ],
)
def test_short_keys_are_refused(
    run: Run, tmp_path: Path, env: dict[str, str], variable: str, value: str, needle: str
) -> None:
    before = snapshot(tmp_path)
    result = run(["serve"], {**env, variable: value}, tmp_path)
    assert_refused(result, variable)
    assert needle in result.stderr
    assert value not in result.stderr  # a key never reaches a message
    assert snapshot(tmp_path) == before


def test_a_world_readable_database_is_refused_with_the_chmod_to_run(
    run: Run, tmp_path: Path, env: dict[str, str]
) -> None:
    open_memory_store(env["RATATOSKR_MEMORY_DB"], embedding_dim=8).close()
    os.chmod(env["RATATOSKR_MEMORY_DB"], 0o644)
    before = snapshot(tmp_path)
    result = run(["serve"], env, tmp_path)
    assert_refused(result, "RATATOSKR_MEMORY_DB")
    assert f"chmod 600 {env['RATATOSKR_MEMORY_DB']}" in result.stderr
    assert snapshot(tmp_path) == before
    doctor = run(["doctor"], env, tmp_path)
    assert doctor.returncode == 1
    assert "readable by group or others" in doctor.stdout


def test_files_are_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        store = open_memory_store(str(tmp_path / "m.db"), embedding_dim=4)
        store.close()
    finally:
        os.umask(old)
    made = [p for p in tmp_path.iterdir() if p.name.startswith("m.db")]
    assert made
    for p in made:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p.name


def test_a_file_holding_another_planes_data_is_refused(
    run: Run, tmp_path: Path, env: dict[str, str]
) -> None:
    """The affect plane pointed at the VMP file once created its tables inside it, and
    `doctor` said all good."""
    open_vmp_store(env["RATATOSKR_VMP_DB"], dim=16).close()
    wrong = {**env, "RATATOSKR_AFFECT_DB": env["RATATOSKR_VMP_DB"], "RATATOSKR_VMP_DB": ":memory:"}
    before = snapshot(tmp_path)
    result = run(["serve", "--plane", "affect"], wrong, tmp_path)
    assert_refused(result, "RATATOSKR_AFFECT_DB")
    assert "holds the vmp plane" in result.stderr
    assert snapshot(tmp_path) == before
    doctor = run(["doctor", "--plane", "affect"], wrong, tmp_path)
    assert doctor.returncode == 1
    assert "holds the vmp plane" in doctor.stdout


def test_a_mistyped_setting_is_refused_naming_the_real_one(
    run: Run, tmp_path: Path, env: dict[str, str]
) -> None:
    before = snapshot(tmp_path)
    result = run(["serve"], {**env, "RATATOSKR_MEMORY_DIM": "768"}, tmp_path)
    assert_refused(result, "RATATOSKR_MEMORY_DIM")
    assert "did you mean RATATOSKR_MEMORY_EMBEDDING_DIM?" in result.stderr
    assert snapshot(tmp_path) == before
    assert unknown_variables({"RATATOSKR_PORT": "1", "OTHER": "x"}) == []
    assert unknown_variables({"RATATOSKR_TEST_PG_DSN": "postgresql://x"}) == []
    assert unknown_variables({"RATATOSKR_ZZZZZZZZ": "1"}) == ["RATATOSKR_ZZZZZZZZ: not a setting"]


def test_host_names() -> None:
    s = Settings(host="10.0.0.5", allowed_hosts="mem.example.com, *.internal")
    assert s.host_names() == [
        "localhost",
        "127.0.0.1",
        "::1",
        "10.0.0.5",
        "mem.example.com",
        "*.internal",
    ]
    assert Settings(host="0.0.0.0").host_names() == ["localhost", "127.0.0.1", "::1"]


def test_max_scope_any_reaches_both_stores(settings: Settings) -> None:
    opened = open_planes(settings.model_copy(update={"max_scope_any": 7}), ("memory", "affect"))
    try:
        assert set(opened.stores) == {"memory", "affect"}
        assert opened.stores["memory"].max_scope_any == 7
        assert opened.stores["affect"].max_scope_any == 7
    finally:
        opened.close()


def test_a_damaged_file_is_refused_at_start_and_a_large_one_is_left_to_doctor(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start reads every page of a file up to ``START_CHECK_LIMIT`` (a 1M-chunk
    memory file took most of a 24 s start); past it, only ``doctor`` does."""
    path = Path(settings.memory_db)
    store = open_memory_store(str(path), embedding_dim=8)
    ctx = DispatchContext(actor="t", plane="memory", verb="upsert_many")
    chunks = [
        {"id": f"c{i}", "embedding": [1.0 + i] * 8, "scope": {}, "content": "x" * 900}
        for i in range(100)
    ]
    store.upsert_many(chunks, idempotency_key="k", ctx=ctx)
    store.close()
    for beside in path.parent.glob("memory.db-*"):
        beside.unlink()  # the index's cache: the damage is the database's
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    ((page,),) = conn.execute(
        "SELECT max(pageno) FROM dbstat WHERE name = 'memory_chunks' AND pagetype = 'leaf'"
    ).fetchall()
    ((size,),) = conn.execute("PRAGMA page_size").fetchall()
    conn.close()
    data = bytearray(path.read_bytes())
    assert isinstance(page, int) and isinstance(size, int)
    at = (page - 1) * size
    data[at + 8 : at + 2048] = b"\xa5" * (2048 - 8)  # a leaf of the chunks' table
    path.write_bytes(bytes(data))
    before = snapshot(path.parent)

    with pytest.raises(ConfigError, match=r"RATATOSKR_MEMORY_DB: .* fails SQLite's integrity"):
        preflight.preflight(settings, ("memory",))
    monkeypatch.setattr(preflight, "START_CHECK_LIMIT", path.stat().st_size - 1)
    preflight.preflight(settings, ("memory",))  # too large to read at start: not checked
    assert any("integrity" in p for p in preflight.database_problems(settings, "memory"))
    assert snapshot(path.parent) == before
