"""The CLI: bad configuration fails at start with one line naming the setting and
no database created or changed; token and doctor."""

from __future__ import annotations

import hashlib
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import jwt
import pytest

from bifrost.context import DispatchContext
from ratatoskr.memory import open_memory_store
from ratatoskr.memory.testing import chunk, one_hot

from .conftest import KEY

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run(ratatoskr_cli: Run) -> Run:
    """``run(args, env, cwd)``: ``ratatoskr <args>`` in process (the root conftest's
    ``ratatoskr_cli``), as a subprocess with only ``env``'s settings would run it."""
    return ratatoskr_cli


def snapshot(d: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.iterdir())
        if p.is_file()
    }


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "RATATOSKR_MEMORY_DB": str(tmp_path / "memory.db"),
        "RATATOSKR_AFFECT_DB": str(tmp_path / "affect.db"),
        "RATATOSKR_VMP_DB": str(tmp_path / "vmp.db"),
        "RATATOSKR_HEIMDALL_KEY": KEY,
        "RATATOSKR_MEMORY_EMBEDDING_DIM": "8",
        "RATATOSKR_PORT": "0",
    }


@pytest.fixture
def busy_port() -> Iterator[int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    yield s.getsockname()[1]
    s.close()


def assert_refused(result: subprocess.CompletedProcess[str], setting: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert setting in lines[0]


def test_wrong_dimension_vs_existing_file(run: Run, tmp_path: Path, env: dict[str, str]) -> None:
    open_memory_store(env["RATATOSKR_MEMORY_DB"], embedding_dim=16).close()
    before = snapshot(tmp_path)
    result = run(["serve"], env, tmp_path)
    assert_refused(result, "RATATOSKR_MEMORY_EMBEDDING_DIM")
    assert "16" in result.stderr
    assert snapshot(tmp_path) == before  # neither changed nor any other plane's file created


def test_unreadable_key_file(run: Run, tmp_path: Path, env: dict[str, str]) -> None:
    del env["RATATOSKR_HEIMDALL_KEY"]
    env["RATATOSKR_HEIMDALL_KEY_FILE"] = str(tmp_path / "missing.key")
    assert_refused(run(["serve"], env, tmp_path), "RATATOSKR_HEIMDALL_KEY_FILE")
    loose = tmp_path / "loose.key"
    loose.write_text("k")
    loose.chmod(0o644)
    env["RATATOSKR_HEIMDALL_KEY_FILE"] = str(loose)
    assert_refused(run(["serve"], env, tmp_path), "RATATOSKR_HEIMDALL_KEY_FILE")
    assert snapshot(tmp_path) == {"loose.key": hashlib.sha256(b"k").hexdigest()}


def test_same_file_for_two_planes(run: Run, tmp_path: Path, env: dict[str, str]) -> None:
    env["RATATOSKR_AFFECT_DB"] = env["RATATOSKR_MEMORY_DB"]
    assert_refused(run(["serve"], env, tmp_path), "RATATOSKR_MEMORY_DB and RATATOSKR_AFFECT_DB")
    assert snapshot(tmp_path) == {}


def test_port_in_use(run: Run, tmp_path: Path, env: dict[str, str], busy_port: int) -> None:
    env["RATATOSKR_PORT"] = str(busy_port)
    assert_refused(run(["serve"], env, tmp_path), "RATATOSKR_PORT")
    assert snapshot(tmp_path) == {}


def test_no_key_is_refused_with_what_to_set(run: Run, tmp_path: Path, env: dict[str, str]) -> None:
    del env["RATATOSKR_HEIMDALL_KEY"]
    result = run(["serve"], env, tmp_path)
    assert_refused(result, "RATATOSKR_HEIMDALL_KEY")
    assert "--dev" in result.stderr
    assert snapshot(tmp_path) == {}


def test_bad_value_names_the_setting(run: Run, tmp_path: Path, env: dict[str, str]) -> None:
    env["RATATOSKR_MEMORY_EMBEDDING_DIM"] = "many"
    assert_refused(run(["serve"], env, tmp_path), "RATATOSKR_MEMORY_EMBEDDING_DIM")


def test_vmp_needs_a_key_off_loopback(run: Run, tmp_path: Path, env: dict[str, str]) -> None:
    env["RATATOSKR_HOST"] = "0.0.0.0"
    assert_refused(run(["serve", "--plane", "vmp"], env, tmp_path), "RATATOSKR_VMP_API_KEY")


def test_token_is_bound_to_body_plane_and_verb(
    run: Run, tmp_path: Path, env: dict[str, str]
) -> None:
    body = tmp_path / "body.json"
    body.write_bytes(b'{"x": 1}')
    result = run(
        [
            "token",
            "--plane",
            "affect",
            "--verb",
            "get",
            "--body",
            str(body),
            "--scope",
            '{"tenant": "t"}',
        ],
        env,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    claims = jwt.decode(result.stdout.strip(), KEY, algorithms=["HS256"], audience="ratatoskr")
    assert claims["bifrost"] == {
        "plane": "affect",
        "verb": "get",
        "body_sha256": hashlib.sha256(b'{"x": 1}').hexdigest(),
        "scope": {"tenant": "t"},
    }
    assert claims["exp"] - claims["iat"] <= 300


def test_doctor(run: Run, tmp_path: Path, env: dict[str, str]) -> None:
    fresh = run(["doctor"], env, tmp_path)
    assert fresh.returncode == 0, fresh.stdout
    assert "not created yet" in fresh.stdout
    assert snapshot(tmp_path) == {}
    open_memory_store(env["RATATOSKR_MEMORY_DB"], embedding_dim=16).close()
    bad = run(["doctor"], env, tmp_path)
    assert bad.returncode == 1
    assert "RATATOSKR_MEMORY_EMBEDDING_DIM=8, but" in bad.stdout
    assert "was created with embedding_dim=16" in bad.stdout
    assert "sqlite-vec" in bad.stdout


def _cache_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if "memory index cache" in line)


def test_doctor_reports_the_memory_index_cache(
    run: Run, tmp_path: Path, env: dict[str, str]
) -> None:
    path = env["RATATOSKR_MEMORY_DB"]
    ctx = DispatchContext(actor="a")

    def write(n: int) -> None:
        store = open_memory_store(path, embedding_dim=8)
        records = [chunk(f"c{n}-{i}", one_hot(i)) for i in range(5)]
        store.upsert_many(records, idempotency_key=f"k{n}", ctx=ctx)
        store.close()  # leaves the sidecar current to its writes

    write(1)
    older = Path(path + "-index").read_bytes()
    write(2)
    before = snapshot(tmp_path)
    current = run(["doctor"], env, tmp_path)
    assert current.returncode == 0, current.stdout
    assert "ok" in _cache_line(current.stdout) and "10 chunks" in _cache_line(current.stdout)
    assert "current" in _cache_line(current.stdout)
    Path(path + "-index").write_bytes(older)  # a sidecar from before the second write
    behind = run(["doctor"], env, tmp_path)
    assert behind.returncode == 0
    assert "5 chunks" in _cache_line(behind.stdout) and "1 change behind" in (
        _cache_line(behind.stdout)
    )
    Path(path + "-index").unlink()
    gone = run(["doctor"], env, tmp_path)
    assert gone.returncode == 0  # a warning: the next open rebuilds it
    assert "warn" in _cache_line(gone.stdout) and "no index cache" in _cache_line(gone.stdout)
    after = snapshot(tmp_path)
    del before["memory.db-index"]
    assert after == before  # doctor changed nothing


def test_dev_mode_key_is_private_and_stable(run: Run, tmp_path: Path) -> None:
    body = tmp_path / "b.json"
    body.write_text("{}")
    first = run(
        ["token", "--dev", "--plane", "memory", "--verb", "health", "--body", str(body)],
        {},
        tmp_path,
    )
    assert first.returncode == 0, first.stderr
    key = tmp_path / "var" / "dev-heimdall.key"
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    content = key.read_bytes()
    run(
        ["token", "--dev", "--plane", "memory", "--verb", "health", "--body", str(body)],
        {},
        tmp_path,
    )
    assert key.read_bytes() == content
