"""``ratatoskr export`` / ``import`` on SQLite: round trips keep every record exactly
(revisions, write times, histories, JSON types), a second import changes nothing,
every refusal names the line and writes nothing, conflicts follow --on-conflict,
and ``-`` reads stdin / writes stdout."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bifrost.consumer.testing import InMemoryAffectStore, InMemoryMemoryStore
from bifrost.context import DispatchContext
from bifrost.portability import validate_chunk_import, validate_key_import
from ratatoskr.affect import open_affect_store
from ratatoskr.memory import open_memory_store
from ratatoskr.provider.export import export_lines, run_export
from ratatoskr.provider.import_ import run_import
from ratatoskr.provider.operate import OperationFailed
from ratatoskr.provider.settings import ConfigError, Settings

from .conftest import KEY
from .test_cli import Run, run

__all__ = ["run"]  # the fixture, re-used

CTX = DispatchContext(actor="agent", scope={})
DIM = 4


def settings_in(d: Path, *, dim: int = DIM, max_batch: int = 7) -> Settings:
    d.mkdir(exist_ok=True)
    return Settings(
        memory_db=str(d / "memory.db"),
        affect_db=str(d / "affect.db"),
        vmp_db=str(d / "vmp.db"),
        memory_embedding_dim=dim,
        heimdall_key=KEY,
        max_batch=max_batch,
    )


def fill(s: Settings) -> None:
    """30 chunks (ints, floats, a big int, both embedding forms; some written three
    times) and 6 affect keys with 3 revisions each."""
    memory = open_memory_store(s.memory_db, embedding_dim=DIM)
    records = [
        {
            "id": f"c{i:02d}",
            "embedding": [1, 2, 3, 4] if i % 5 == 0 else [0.5, -0.0, 1e-300, float(i + 1)],
            "scope": {"tenant": "t", "end_user": f"u{i % 3}"},
            "n": 1,
            "f": 1.0,
            "big": 2**70,
            "text": "é\u0000 ☃",
        }
        for i in range(30)
    ]
    for round_ in range(3):
        memory.upsert_many(records[: 10 * (3 - round_)], idempotency_key=f"m{round_}", ctx=CTX)
    memory.close()
    affect = open_affect_store(s.affect_db)
    for round_ in range(3):
        affect.put_many(
            [{"key": f"k{i}", "scope": {"tenant": "t"}, "mood": round_ + 0.5} for i in range(6)],
            idempotency_key=f"a{round_}",
            ctx=CTX,
        )
    affect.close()


def body(path: Path) -> list[str]:
    """The lines after the header."""
    return path.read_text().splitlines()[1:]


@pytest.fixture
def source(tmp_path: Path) -> Settings:
    s = settings_in(tmp_path / "src")
    fill(s)
    return s


@pytest.mark.parametrize("plane", ["memory", "affect"])
def test_round_trip_is_exact_and_a_second_import_changes_nothing(
    source: Settings, tmp_path: Path, plane: str, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = settings_in(tmp_path / "dst")
    first, again = tmp_path / "first.jsonl", tmp_path / "again.jsonl"
    run_export(source, plane, str(first), None)
    assert stat.S_IMODE(os.stat(first).st_mode) == 0o600
    run_import(dest, plane, str(first), "fail")
    run_export(dest, plane, str(again), None)
    assert body(first) == body(again)
    head = json.loads(first.read_text().splitlines()[0])
    assert head["plane"] == plane and head["version"] == 1
    assert ("embedding_dim" in head) == (plane == "memory")
    before = (tmp_path / "dst" / f"{plane}.db").read_bytes()
    capsys.readouterr()
    run_import(dest, plane, str(first), "fail")
    assert "0 new" in capsys.readouterr().err
    run_export(dest, plane, str(again), None)
    assert body(first) == body(again)
    if plane == "affect":
        # Nothing was written at all: not even a transaction's worth of pages changed.
        assert (tmp_path / "dst" / "affect.db").read_bytes() == before


def test_imported_memory_reads_and_searches_as_the_source(source: Settings, tmp_path: Path) -> None:
    dest = settings_in(tmp_path / "dst")
    out = tmp_path / "m.jsonl"
    run_export(source, "memory", str(out), None)
    run_import(dest, "memory", str(out), "fail")
    a = open_memory_store(source.memory_db, embedding_dim=DIM)
    b = open_memory_store(dest.memory_db, embedding_dim=DIM)
    try:
        ids = [f"c{i:02d}" for i in range(30)]
        got_a, got_b = a.get_many(ids), b.get_many(ids)
        assert got_a == got_b
        assert json.dumps(got_a) == json.dumps(got_b)  # ints stay ints, floats floats
        assert {r["revision"] for r in got_b} == {1, 2, 3}
        vector, scope = [0.5, 0.1, 0.2, 3.0], {"end_user": "u1"}
        found = [s.search(vector, top_k=7, scope_all=scope) for s in (a, b)]
        assert found[0] == found[1] and len(found[0]) == 7
    finally:
        a.close()
        b.close()


def test_affect_history_and_stamps_are_kept(source: Settings, tmp_path: Path) -> None:
    dest = settings_in(tmp_path / "dst")
    out = tmp_path / "a.jsonl"
    run_export(source, "affect", str(out), None)
    run_import(dest, "affect", str(out), "fail")
    a, b = open_affect_store(source.affect_db), open_affect_store(dest.affect_db)
    try:
        for key in ("k0", "k5"):
            assert a.history(key) == b.history(key)
            assert a.get(key) == b.get(key)
            assert b.get(key)["revision"] == 3  # type: ignore[index]
        listed = b.list(scope_all={"tenant": "t"})
        assert [r["key"] for r in listed["items"]] == [f"k{i}" for i in range(6)]
    finally:
        a.close()
        b.close()


def test_scope_selects_and_refuses_unknown_axes(source: Settings, tmp_path: Path) -> None:
    out = tmp_path / "u1.jsonl"
    run_export(source, "memory", str(out), '{"end_user": "u1"}')
    ids = [json.loads(line)["record"]["id"] for line in body(out)]
    assert ids == [f"c{i:02d}" for i in range(30) if i % 3 == 1]
    assert json.loads(out.read_text().splitlines()[0])["scope"] == {"end_user": "u1"}
    with pytest.raises(ConfigError, match="--scope"):
        run_export(source, "memory", str(tmp_path / "x.jsonl"), '{"planet": "mars"}')
    with pytest.raises(ConfigError, match="--scope"):
        run_export(source, "memory", str(tmp_path / "x.jsonl"), "[1]")
    assert not (tmp_path / "x.jsonl").exists()


def _export(source: Settings, tmp_path: Path, plane: str = "memory") -> list[str]:
    out = tmp_path / f"{plane}.jsonl"
    run_export(source, plane, str(out), None)
    return out.read_text().splitlines()


def _refused(dest: Settings, plane: str, path: Path, *words: str) -> str:
    with pytest.raises(OperationFailed) as caught:
        run_import(dest, plane, str(path), "fail")
    message = str(caught.value)
    assert "nothing written" in message
    for word in words:
        assert word in message, message
    # Not even the database file was made.
    assert not os.path.exists(dest.db_path(plane))
    return message


def test_refusals_name_the_line_and_write_nothing(source: Settings, tmp_path: Path) -> None:
    lines = _export(source, tmp_path)
    dest = settings_in(tmp_path / "dst")
    bad = tmp_path / "bad.jsonl"

    def write(rows: list[str]) -> Path:
        bad.write_text("\n".join(rows) + "\n")
        return bad

    _refused(settings_in(tmp_path / "dst16", dim=16), "memory", write(lines), "line 1", "16")
    _refused(dest, "affect", write(lines), "line 1", "memory plane")
    _refused(dest, "memory", write(["not json", *lines[1:]]), "line 1", "header")
    head = json.loads(lines[0])
    _refused(dest, "memory", write([json.dumps({**head, "version": 9}), *lines[1:]]), "version 9")
    _refused(dest, "memory", write([]), "line 1", "no header")
    # A malformed line deep in the file (past the first batches): its number, never
    # its content.
    secret = '{"record": {"id": "SECRET-CONTENT"'
    message = _refused(dest, "memory", write([*lines[:20], secret, *lines[20:]]), "line 21")
    assert "SECRET" not in message
    entry = json.loads(lines[5])
    entry["record"]["scope"] = {"planet": "SECRET-SCOPE"}
    message = _refused(dest, "memory", write([*lines[:5], json.dumps(entry), *lines[6:]]), "line 6")
    assert "SECRET" not in message
    entry = json.loads(lines[3])
    entry["record"]["embedding"] = [1.0, 2.0]
    _refused(dest, "memory", write([*lines[:3], json.dumps(entry), *lines[4:]]), "line 4")
    entry = json.loads(lines[2])
    entry["revision"] = 0
    _refused(dest, "memory", write([*lines[:2], json.dumps(entry), *lines[3:]]), "line 3")
    _refused(dest, "memory", write([*lines, lines[9]]), f"line {len(lines) + 1}", "line 10")
    affect = _export(source, tmp_path, "affect")
    entry = json.loads(affect[2])
    entry["history"].reverse()
    _refused(dest, "affect", write([*affect[:2], json.dumps(entry), *affect[3:]]), "line 3")


def _outcome(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("plane", ["memory", "affect"])
def test_conflicts_follow_on_conflict(
    source: Settings, tmp_path: Path, plane: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x.jsonl"
    run_export(source, plane, str(out), None)
    dest = settings_in(tmp_path / "dst")
    # The destination holds the first id with another record.
    if plane == "memory":
        store: Any = open_memory_store(dest.memory_db, embedding_dim=DIM)
        store.upsert_many(
            [{"id": "c00", "embedding": [1.0] * DIM, "scope": {"tenant": "t", "end_user": "u0"}}],
            idempotency_key="x",
            ctx=CTX,
        )
        first = "c00"
    else:
        store = open_affect_store(dest.affect_db)
        store.put_many(
            [{"key": "k0", "scope": {"tenant": "t"}, "v": 1}], idempotency_key="x", ctx=CTX
        )
        first = "k0"
    store.close()
    theirs = out.read_text().splitlines()
    with pytest.raises(OperationFailed, match="line 2") as caught:
        run_import(dest, plane, str(out), "fail")
    assert "0 entries before line 2" in str(caught.value)
    mine = tmp_path / "mine.jsonl"
    run_export(dest, plane, str(mine), None)
    assert len(body(mine)) == 1  # the whole first batch was refused
    capsys.readouterr()
    run_import(dest, plane, str(out), "skip")
    assert "1 skipped" in _outcome(capsys)
    run_export(dest, plane, str(mine), None)
    assert body(mine)[1:] == theirs[2:]
    assert body(mine)[0] != theirs[1]
    assert first in body(mine)[0]
    run_import(dest, plane, str(out), "replace")
    assert "1 replaced" in _outcome(capsys)
    run_export(dest, plane, str(mine), None)
    assert body(mine) == theirs[1:]


@pytest.mark.slow
def test_stdin_and_stdout(run: Run, source: Settings, tmp_path: Path) -> None:
    env = {
        "RATATOSKR_MEMORY_DB": source.memory_db,
        "RATATOSKR_AFFECT_DB": source.affect_db,
        "RATATOSKR_MEMORY_EMBEDDING_DIM": str(DIM),
        "RATATOSKR_HEIMDALL_KEY": KEY,
    }
    exported = run(["export", "--plane", "memory", "--to", "-"], env, tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert "exported 30 chunks" in exported.stderr
    dest = tmp_path / "dst"
    dest.mkdir()
    env_dest = {**env, "RATATOSKR_MEMORY_DB": str(dest / "memory.db")}
    full = {k: v for k, v in os.environ.items() if not k.startswith("RATATOSKR_")}
    imported = subprocess.run(
        [sys.executable, "-m", "ratatoskr.provider", "import", "--plane", "memory", "--from", "-"],
        input=exported.stdout,
        env={**full, **env_dest},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert imported.returncode == 0, imported.stderr
    assert "30 new" in imported.stderr
    # A real process's stdin (above) and stdout (here); the refusal in process.
    again = subprocess.run(
        [sys.executable, "-m", "ratatoskr.provider", "export", "--plane", "memory", "--to", "-"],
        env={**full, **env_dest},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[1:] == exported.stdout.splitlines()[1:]
    broken = "\n".join([*exported.stdout.splitlines()[:3], "{oops"]) + "\n"
    refused = run(
        ["import", "--plane", "memory", "--from", "-"],
        {**env, "RATATOSKR_MEMORY_DB": str(dest / "other.db")},
        tmp_path,
        input=broken,
    )
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "ratatoskr: import refused, nothing written: line 4: not a JSON object"
    )
    assert not (dest / "other.db").exists()


@pytest.mark.parametrize("plane", ["memory", "affect"])
def test_reference_store_imports_and_exports_the_same_lines(
    source: Settings, tmp_path: Path, plane: str
) -> None:
    """The reference stores (bifrost's authority) hold an import as SQLite does: the
    same file in, the same lines out, and a second import skips everything."""
    out = tmp_path / "x.jsonl"
    run_export(source, plane, str(out), None)
    lines = out.read_text().splitlines()
    entries = [json.loads(line) for line in lines[1:]]
    store: Any
    if plane == "memory":
        store = InMemoryMemoryStore(DIM)
        batch: Any = validate_chunk_import(entries, embedding_dim=DIM, max_batch=1000)
        first, second = store.import_chunks(batch, "fail"), store.import_chunks(batch, "fail")
    else:
        store = InMemoryAffectStore()
        batch = validate_key_import(entries, max_batch=1000)
        first, second = store.import_keys(batch, "fail"), store.import_keys(batch, "fail")
    assert (first.written, second.written, second.skipped) == (len(entries), 0, len(entries))
    again = b"".join(data for data, _n in export_lines(store, plane, {}))
    assert again.decode().splitlines() == lines[1:]
