"""``ratatoskr backup``, ``restore`` and ``stats`` as a user runs them (a subprocess):
one line and nothing written on bad input; ``GET /readyz`` in process."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from bifrost.context import DispatchContext
from ratatoskr.affect import open_affect_store
from ratatoskr.memory import open_memory_store
from ratatoskr.provider.app import build_provider_app
from ratatoskr.provider.operate import plane_file, run_backup, run_restore, run_stats
from ratatoskr.provider.settings import ConfigError, Plane, Settings

from .conftest import KEY
from .test_cli import Run, run

__all__ = ["run"]  # the fixture, re-used

CTX = DispatchContext(actor="agent", scope={"tenant": "t"})


def listing(d: Path) -> dict[str, str]:
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.rglob("*"))
        if p.is_file()
    }


def refused(result: subprocess.CompletedProcess[str], *words: str) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ratatoskr: ")
    for word in words:
        assert word in lines[0], lines[0]
    assert result.stdout == ""
    return lines[0]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "data").mkdir()
    return {
        "RATATOSKR_MEMORY_DB": str(tmp_path / "data" / "memory.db"),
        "RATATOSKR_AFFECT_DB": str(tmp_path / "data" / "affect.db"),
        "RATATOSKR_VMP_DB": str(tmp_path / "data" / "vmp.db"),
        "RATATOSKR_MEMORY_EMBEDDING_DIM": "8",
        "RATATOSKR_HEIMDALL_KEY": KEY,
    }


@pytest.fixture
def planes(env: dict[str, str]) -> dict[str, str]:
    """Memory (20 chunks, 2 deleted) and affect (3 keys) files, closed."""
    memory = open_memory_store(env["RATATOSKR_MEMORY_DB"], embedding_dim=8)
    records = [
        {"id": f"c{i}", "embedding": [1.0] * 8, "scope": {"tenant": "t"}, "content": "x"}
        for i in range(20)
    ]
    memory.upsert_many(records, idempotency_key="seed", ctx=CTX)
    memory.delete_many(["c0", "c1"])
    memory.close()
    affect = open_affect_store(env["RATATOSKR_AFFECT_DB"])
    affect.put_many(
        [{"key": f"k{i}", "scope": {"tenant": "t"}, "mood": i} for i in range(3)],
        idempotency_key="seed",
        ctx=CTX,
    )
    affect.close()
    return {"memory": env["RATATOSKR_MEMORY_DB"], "affect": env["RATATOSKR_AFFECT_DB"]}


# -- backup -----------------------------------------------------------------------------


def test_backup_then_restore_round_trip(
    run: Run, tmp_path: Path, env: dict[str, str], planes: dict[str, str]
) -> None:
    for plane in ("memory", "affect"):
        copy = tmp_path / f"{plane}.bak"
        done = run(["backup", "--plane", plane, "--to", str(copy)], env, tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"ratatoskr: backed up {plane} to {copy}")
        assert "integrity ok" in done.stdout
        assert ("embedding_dim 8" in done.stdout) == (plane == "memory")
        assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    # Restore the memory backup over a file that has moved on since.
    memory = open_memory_store(planes["memory"], embedding_dim=8)
    memory.delete_many([f"c{i}" for i in range(2, 20)])
    memory.close()
    done = run(
        ["restore", "--plane", "memory", "--from", str(tmp_path / "memory.bak")], env, tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "replaced" in done.stdout
    assert not Path(planes["memory"] + "-index").exists()  # the replaced file's cache: gone
    memory = open_memory_store(planes["memory"], embedding_dim=8)
    assert memory.count() == 18
    memory.close()
    assert stat.S_IMODE(Path(planes["memory"]).stat().st_mode) == 0o600


def test_backup_refuses_the_files_beside_a_symlinked_database(
    tmp_path: Path, env: dict[str, str], planes: dict[str, str]
) -> None:
    """SQLite and the stores keep their files beside the link's target; a setting that
    is a symlink must not let a backup land on them (a live -wal overwritten loses
    commits). The replay cache's own SQLite files and a cache's temporaries too."""
    real = Path(planes["memory"])
    link = tmp_path / "link.db"
    link.symlink_to(real)
    settings = config(env, memory_db=str(link))
    open_memory_store(str(link), embedding_dim=8).close()
    targets = [
        f"{real}-wal",
        f"{real}-index",
        f"{real}-index.tmp-123-abc",
        f"{real}.replay-wal",
        f"{real}.replay-shm",
    ]
    for target in targets:

        def attempt(to: str = target) -> object:
            return run_backup(settings, "memory", to, overwrite=True, out=io.StringIO())

        line = refusal(attempt)
        assert line.startswith("--to: ") and "beside" in line, target


def test_a_refusal_is_one_line_on_stderr_exit_2(
    run: Run, tmp_path: Path, env: dict[str, str]
) -> None:
    before = listing(tmp_path)
    refused(run(["backup", "--plane", "vmp", "--to", "v.bak"], env, tmp_path), "snapshot")
    refused(run(["restore", "--plane", "memory", "--from", "missing.bak"], env, tmp_path), "--from")
    assert listing(tmp_path) == before


def config(env: dict[str, str], **changes: str) -> Settings:
    """The settings ``env`` describes (what the CLI would load), with ``changes``."""
    values = {k.removeprefix("RATATOSKR_").lower(): v for k, v in env.items()}
    return Settings(**{**values, **changes})  # type: ignore[arg-type]


def refusal(call: Callable[[], object]) -> str:
    """The one-line ConfigError ``call`` raises (what ``main`` prints, exit status 2)."""
    with pytest.raises(ConfigError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_backup_refusals_write_nothing(
    tmp_path: Path, env: dict[str, str], planes: dict[str, str]
) -> None:
    (tmp_path / "exists.bak").write_bytes(b"old")
    before = listing(tmp_path)
    out = io.StringIO()

    def backup(to: Path | str, plane: Plane = "memory", **changes: str) -> str:
        settings = config(env, **changes)
        return refusal(lambda: run_backup(settings, plane, str(to), overwrite=False, out=out))

    beside = [planes["memory"] + "-wal", planes["memory"] + "-index", planes["affect"] + ".replay"]
    for target in (planes["memory"], *beside):  # SQLite's, the memory index's, the replay cache
        assert backup(target).startswith("--to: "), target
    assert "--overwrite" in backup(tmp_path / "exists.bak")
    assert "directory" in backup(tmp_path / "no" / "x.bak")
    assert "directory" in backup(tmp_path)
    line = backup(tmp_path / "x.bak", memory_embedding_dim="16")
    assert line.startswith("RATATOSKR_MEMORY_DB: ")
    assert "embedding_dim=8, but RATATOSKR_MEMORY_EMBEDDING_DIM=16" in line
    swapped = backup(tmp_path / "x.bak", memory_db=planes["affect"], affect_db="a.db")
    assert "holds the affect plane" in swapped
    line = backup(tmp_path / "x.bak", "affect", affect_db=str(tmp_path / "data" / "none.db"))
    assert line.startswith("RATATOSKR_AFFECT_DB: ") and "nothing to back up" in line
    assert ":memory:" in backup(tmp_path / "x.bak", "affect", affect_db=":memory:")
    assert "snapshot" in backup(tmp_path / "x.bak", "vmp")
    assert listing(tmp_path) == before
    assert out.getvalue() == ""


def test_backup_overwrite(tmp_path: Path, env: dict[str, str], planes: dict[str, str]) -> None:
    old = tmp_path / "nightly.bak"
    old.write_bytes(b"yesterday")
    run_backup(config(env), "affect", str(old), overwrite=True, out=io.StringIO())
    assert old.read_bytes().startswith(b"SQLite format 3\0")


# -- restore ----------------------------------------------------------------------------


def test_restore_refusals_leave_everything_as_it_was(
    tmp_path: Path, env: dict[str, str], planes: dict[str, str]
) -> None:
    settings = config(env)
    out = io.StringIO()
    run_backup(settings, "memory", str(tmp_path / "m.bak"), overwrite=False, out=out)
    run_backup(settings, "affect", str(tmp_path / "a.bak"), overwrite=False, out=out)
    junk = tmp_path / "junk.bak"
    junk.write_bytes(b"SQLite format 3\0" + os.urandom(5000))
    torn = tmp_path / "torn.bak"
    torn.write_bytes((tmp_path / "m.bak").read_bytes()[:8192])
    before, printed = listing(tmp_path), out.getvalue()

    def restore(plane: Plane, source: Path | str, **changes: str) -> str:
        settings = config(env, **changes)
        return refusal(lambda: run_restore(settings, plane, str(source), out=out))

    assert "holds the affect plane, not memory" in restore("memory", tmp_path / "a.bak")
    assert "holds the memory plane, not affect" in restore("affect", tmp_path / "m.bak")
    line = restore("memory", tmp_path / "m.bak", memory_embedding_dim="16")
    assert "embedding_dim=8, but RATATOSKR_MEMORY_EMBEDDING_DIM=16" in line
    assert line.endswith(f"{planes['memory']} left as it was")
    assert "not a SQLite database" in restore("memory", junk)
    assert restore("memory", torn).startswith("--from: ")
    assert "does not exist" in restore("memory", tmp_path / "missing.bak")
    assert "live database" in restore("memory", planes["memory"])
    assert "live database" in restore("affect", planes["memory"])  # another plane's file
    assert os.path.isfile(planes["memory"] + "-index")  # the memory index's cache
    assert "live database" in restore("affect", planes["memory"] + "-index")
    assert "snapshot" in restore("vmp", tmp_path / "m.bak")
    assert ":memory:" in restore("affect", tmp_path / "a.bak", affect_db=":memory:")
    line = restore("affect", tmp_path / "a.bak", affect_db=str(tmp_path / "gone" / "a.db"))
    assert line.startswith("RATATOSKR_AFFECT_DB: ") and "directory" in line
    assert listing(tmp_path) == before
    assert out.getvalue() == printed


def test_restore_into_a_new_deployment(
    run: Run, tmp_path: Path, env: dict[str, str], planes: dict[str, str]
) -> None:
    run_backup(config(env), "affect", str(tmp_path / "a.bak"), overwrite=False, out=io.StringIO())
    (tmp_path / "new").mkdir()
    fresh = {**env, "RATATOSKR_AFFECT_DB": str(tmp_path / "new" / "affect.db")}
    done = run(["restore", "--plane", "affect", "--from", str(tmp_path / "a.bak")], fresh, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "created" in done.stdout
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["affect.db"]
    store = open_affect_store(fresh["RATATOSKR_AFFECT_DB"])
    assert store.get("k2") is not None
    store.close()


def test_plane_file_takes_its_facts_from_the_planes(settings: Settings) -> None:
    memory = plane_file(settings, "memory")
    assert memory.meta["embedding_dim"].value == "8"
    assert memory.meta["embedding_dim"].setting == "RATATOSKR_MEMORY_EMBEDDING_DIM"
    assert memory.schema_version >= 2
    assert plane_file(settings, "affect").meta == {}


# -- stats ------------------------------------------------------------------------------


def test_stats_table_and_json(
    run: Run, tmp_path: Path, env: dict[str, str], planes: dict[str, str]
) -> None:
    before = listing(tmp_path)
    done = run(["stats", "--json"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)["planes"]
    memory, affect, vmp = report["memory"], report["affect"], report["vmp"]
    assert memory["tables"]["memory_chunks"]["rows"] == 18
    assert memory["tables"]["memory_vec"] == {"rows": 18, "kind": "virtual"}
    assert memory["tombstones"] == 2
    assert memory["ledger_entries"] >= 1 and memory["ledger_expired"] == 0
    assert memory["schema_version"] >= 2 and memory["planes"] == ["memory"]
    assert memory["file_bytes"] == memory["page_count"] * memory["page_size"]
    assert memory["free_bytes"] == memory["freelist_pages"] * memory["page_size"]
    assert affect["tables"]["affect_current"]["rows"] == 3
    assert affect["tombstones"] == 0
    assert vmp == {**vmp, "exists": False}
    text = run(["stats", "--plane", "memory"], env, tmp_path)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split()[:4] == ["plane", "file", "schema", "size"]
    assert any(
        line.split()[:2] == ["memory", "memory_chunks"] and line.split()[-1] == "18"
        for line in lines
    )
    assert "affect" not in text.stdout
    assert listing(tmp_path) == before  # read-only


def test_stats_of_an_unreadable_file_exits_1(tmp_path: Path, env: dict[str, str]) -> None:
    Path(env["RATATOSKR_AFFECT_DB"]).write_bytes(b"not a database at all" * 300)
    out = io.StringIO()
    assert run_stats(config(env), ("affect",), as_json=True, out=out) == 1
    assert "error" in json.loads(out.getvalue())["planes"]["affect"]


# -- readyz -----------------------------------------------------------------------------


@pytest.fixture
def combined(settings: Settings) -> Iterator[TestClient]:
    with TestClient(build_provider_app(settings)) as client:
        yield client


def test_readyz_names_every_plane(combined: TestClient) -> None:
    resp = combined.get("/readyz", headers={"host": "pod-10-0-0-7"})
    assert resp.status_code == 200
    assert resp.json() == {
        "status": "ready",
        "planes": {"memory": "ready", "affect": "ready", "vmp": "ready"},
    }


def test_readyz_fails_the_plane_whose_file_went(
    combined: TestClient, settings: Settings, tmp_path: Path
) -> None:
    os.rename(settings.affect_db, tmp_path / "aside.db")
    resp = combined.get("/readyz")
    assert resp.status_code == 503
    body = resp.json()
    assert body["failed"] == ["affect"]
    assert body["planes"]["affect"] == "database file missing or replaced"
    assert body["planes"]["memory"] == "ready"
    assert str(tmp_path) not in resp.text
    os.rename(tmp_path / "aside.db", settings.affect_db)
    assert combined.get("/readyz").status_code == 200
    os.unlink(settings.memory_db + ".replay")
    body = combined.get("/readyz").json()
    assert body["failed"] == ["memory"]
    assert body["planes"]["memory"] == "replay cache file missing or replaced"


def test_readyz_of_one_plane_at_the_root(settings: Settings) -> None:
    with TestClient(build_provider_app(settings, ("vmp",))) as client:
        assert client.get("/readyz").json() == {"status": "ready", "planes": {"vmp": "ready"}}
