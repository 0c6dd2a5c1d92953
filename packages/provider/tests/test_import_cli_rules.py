"""``ratatoskr export`` / ``import`` and what the destination's rules make of a file:
retention (an export leaves expired chunks out, an import skips entries already
expired and says how many), and a ``replace`` that would move a record to
another scope (refused naming the line, never the content, unless
``--allow-scope-change``). The store-level rules on every backend are in
tests/test_portability_rules.py."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from bifrost.context import DispatchContext
from ratatoskr.memory import open_memory_store
from ratatoskr.provider.export import run_export
from ratatoskr.provider.import_ import run_import
from ratatoskr.provider.operate import OperationFailed
from ratatoskr.provider.settings import Settings

from .conftest import KEY
from .test_cli import Run, run

__all__ = ["run"]  # the fixture, re-used

CTX = DispatchContext(actor="agent", scope={})
DIM = 4


def settings_in(d: Path, *, retention_s: float | None = None) -> Settings:
    d.mkdir(exist_ok=True)
    return Settings(
        memory_db=str(d / "memory.db"),
        affect_db=str(d / "affect.db"),
        vmp_db=str(d / "vmp.db"),
        memory_embedding_dim=DIM,
        heimdall_key=KEY,
        memory_retention_s=retention_s,
    )


def chunk(cid: str, tenant: str = "t", content: str = "c") -> dict[str, Any]:
    return {
        "id": cid,
        "embedding": [1.0, 2.0, 3.0, 4.0],
        "scope": {"tenant": tenant},
        "content": content,
    }


def write(s: Settings, records: list[dict[str, Any]], *, ago: float = 0.0) -> None:
    """Upsert ``records`` as if ``ago`` seconds ago."""
    store = open_memory_store(s.memory_db, embedding_dim=DIM, clock=lambda: time.time() - ago)
    try:
        store.upsert_many(records, idempotency_key=f"w{time.monotonic_ns()}", ctx=CTX)
    finally:
        store.close()


def ids(path: Path) -> list[str]:
    return [json.loads(line)["record"]["id"] for line in path.read_text().splitlines()[1:]]


def test_export_leaves_out_expired_chunks_and_import_counts_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    forever = settings_in(tmp_path / "src")
    write(forever, [chunk("old-1"), chunk("old-2")], ago=1000.0)
    write(forever, [chunk("new")])
    kept = settings_in(tmp_path / "src", retention_s=100.0)
    out = tmp_path / "kept.jsonl"
    run_export(kept, "memory", str(out), None)
    assert ids(out) == ["new"]
    assert "exported 1 chunks" in capsys.readouterr().err
    # Exported without retention, the old chunks are in the file (written 1000 s ago):
    # a destination with retention does not bring them back.
    every = tmp_path / "every.jsonl"
    run_export(forever, "memory", str(every), None)
    assert ids(every) == ["new", "old-1", "old-2"]
    dest = settings_in(tmp_path / "dst", retention_s=100.0)
    capsys.readouterr()
    run_import(dest, "memory", str(every), "fail")
    summary = capsys.readouterr().err.strip().splitlines()[-1]
    assert "1 new" in summary and "2 expired (retention)" in summary, summary
    again = tmp_path / "again.jsonl"
    run_export(dest, "memory", str(again), None)
    assert ids(again) == ["new"]


def test_replace_into_another_scope_is_refused_naming_the_line(
    run: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = settings_in(tmp_path / "dst")
    write(dest, [chunk("a-mine", content="before"), chunk("victim", tenant="u", content="theirs")])
    source = settings_in(tmp_path / "src")
    write(source, [chunk("a-mine", content="after"), chunk("victim", content="SECRET-ATTACKER")])
    out = tmp_path / "crafted.jsonl"
    run_export(source, "memory", str(out), None)
    before = tmp_path / "before.jsonl"
    run_export(dest, "memory", str(before), None)
    with pytest.raises(OperationFailed) as caught:
        run_import(dest, "memory", str(out), "replace")
    message = str(caught.value)
    assert "line 3" in message and "--allow-scope-change" in message, message
    assert "SECRET" not in message and "theirs" not in message and '"u"' not in message
    after = tmp_path / "after.jsonl"
    run_export(dest, "memory", str(after), None)
    assert after.read_text().splitlines()[1:] == before.read_text().splitlines()[1:]
    # Told it may, the command moves it, numbered above what it overwrote.
    env = {
        "RATATOSKR_MEMORY_DB": dest.memory_db,
        "RATATOSKR_MEMORY_EMBEDDING_DIM": str(DIM),
        "RATATOSKR_HEIMDALL_KEY": KEY,
    }
    args = ["import", "--plane", "memory", "--from", str(out), "--on-conflict", "replace"]
    done = run([*args, "--allow-scope-change"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "2 replaced" in done.stderr
    store = open_memory_store(dest.memory_db, embedding_dim=DIM)
    try:
        victim = store.get("victim")
    finally:
        store.close()
    assert victim is not None
    assert (victim["scope"], victim["content"], victim["revision"]) == (
        {"tenant": "t"},
        "SECRET-ATTACKER",
        2,
    )
    helped = run(["import", "--help"], env, tmp_path)
    assert "--allow-scope-change" in helped.stdout
    assert "bypasses every tenant's grant" in " ".join(helped.stdout.split())
