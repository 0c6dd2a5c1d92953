"""Settings: every field described and documented; the layout and key checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ratatoskr.provider.preflight import validate_layout
from ratatoskr.provider.settings import ConfigError, Settings

SETTINGS_PAGE = Path(__file__).resolve().parents[3] / "docs" / "settings.md"


def test_every_setting_has_a_description() -> None:
    for name, field in Settings.model_fields.items():
        assert field.description, name


def test_every_setting_is_in_the_settings_page() -> None:
    text = SETTINGS_PAGE.read_text()
    for name in Settings.model_fields:
        assert f"| `RATATOSKR_{name.upper()}` |" in text, name


def test_environment_is_read_with_the_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RATATOSKR_MEMORY_EMBEDDING_DIM", "768")
    monkeypatch.setenv("RATATOSKR_HEIMDALL_KEY", "k" * 32)
    s = Settings()
    assert s.memory_embedding_dim == 768
    assert s.heimdall_key_bytes() == b"k" * 32


def test_planes_default_to_separate_files() -> None:
    s = Settings()
    assert len({s.memory_db, s.affect_db, s.vmp_db}) == 3


def test_two_planes_on_one_file_are_refused(tmp_path: Path) -> None:
    same = str(tmp_path / "one.db")
    s = Settings(memory_db=same, affect_db=str(tmp_path / "." / "one.db"))
    with pytest.raises(ConfigError, match="RATATOSKR_MEMORY_DB and RATATOSKR_AFFECT_DB"):
        validate_layout(s, ("memory", "affect", "vmp"))


def test_missing_directory_is_refused(tmp_path: Path) -> None:
    s = Settings(vmp_db=str(tmp_path / "nope" / "vmp.db"))
    with pytest.raises(ConfigError, match="RATATOSKR_VMP_DB"):
        validate_layout(s, ("vmp",))


def test_key_and_key_file_are_exclusive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not both"):
        Settings(heimdall_key="a", heimdall_key_file=tmp_path / "k")


def test_missing_key_says_what_to_set() -> None:
    with pytest.raises(ConfigError, match="RATATOSKR_HEIMDALL_KEY"):
        Settings().heimdall_key_bytes()


def test_key_file(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("s" * 32 + "\n")
    os.chmod(key, 0o600)
    assert Settings(heimdall_key_file=key).heimdall_key_bytes() == b"s" * 32
    os.chmod(key, 0o644)
    with pytest.raises(ConfigError, match="readable by others"):
        Settings(heimdall_key_file=key).heimdall_key_bytes()
    with pytest.raises(ConfigError, match="cannot read"):
        Settings(heimdall_key_file=tmp_path / "absent").heimdall_key_bytes()


def test_secrets_do_not_show_in_repr() -> None:
    s = Settings(heimdall_key="topsecret" * 4, vmp_api_key="alsosecret" * 2)
    assert "topsecret" not in repr(s)
    assert "alsosecret" not in repr(s)


def test_the_settings_import_no_plane_and_no_driver() -> None:
    # A leaf module: reading the settings (the CLI's --help, doctor, tools/settings_doc)
    # must not pay for every plane, numpy and psycopg.
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import ratatoskr.provider.settings"],
        capture_output=True,
        text=True,
        check=True,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert "ratatoskr.provider.settings" in imported
    heavy = sorted(
        name
        for name in imported
        if name.split(".")[0] in ("numpy", "psycopg", "psycopg_pool")
        or name.startswith(("ratatoskr.memory", "ratatoskr.affect", "ratatoskr.vmp"))
        or name == "ratatoskr.provider.registry"
    )
    assert heavy == []


def test_an_embedding_field_is_no_filterable_field() -> None:
    with pytest.raises(ValueError, match="where a record's embedding sits"):
        Settings(memory_filterable_fields="metadata.kind,vector")
    assert Settings(memory_filterable_fields="metadata.vector").memory_filterable_fields
