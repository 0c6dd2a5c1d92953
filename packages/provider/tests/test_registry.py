"""The plane table: every entry is served by every part of the provider that reads it
(settings, ``--dev``, preflight and ``doctor``, the app, ``/readyz``, ``/metrics``, the
operator commands, the command line), and nothing names a plane the table lacks."""

from __future__ import annotations

import inspect
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from starlette.routing import Mount
from starlette.testclient import TestClient

from bifrost.planes import PLANE_SPECS
from ratatoskr.affect import build_affect_provider_app
from ratatoskr.memory import build_memory_provider_app
from ratatoskr.provider.app import build_provider_app
from ratatoskr.provider.cli import parser
from ratatoskr.provider.devmode import dev_settings
from ratatoskr.provider.doctor import run_doctor
from ratatoskr.provider.operate import plane_file, run_backup, run_compact, run_stats
from ratatoskr.provider.preflight import keys_of, open_planes
from ratatoskr.provider.registry import PLANE_TABLE, PLANES, Key, entry
from ratatoskr.provider.settings import ConfigError, Settings
from ratatoskr.sqlite import inspect_database, token_cache_path

DSN = "postgresql://user:secret@db.invalid/app"


def test_the_table_is_the_list_of_planes() -> None:
    assert PLANES == tuple(PLANE_TABLE) == ("memory", "affect", "vmp")
    for name, plane in PLANE_TABLE.items():
        assert plane.name == name
        assert entry(name) is plane
    with pytest.raises(KeyError):
        entry("nonesuch")


def test_every_bifrost_plane_has_an_entry_and_every_entry_its_wire() -> None:
    wired = {name: plane.wire for name, plane in PLANE_TABLE.items() if plane.wire is not None}
    assert wired == dict(PLANE_SPECS)
    for plane in PLANE_TABLE.values():
        if plane.wire is None:
            assert plane.verbs is None
        else:  # its calls carry Heimdall tokens and are labelled by verb
            assert plane.key is Key.HEIMDALL
            assert plane.verbs == frozenset({*plane.wire.verb_names, "handshake"})


def test_every_database_setting_is_a_planes_and_every_plane_has_one() -> None:
    db_fields = {
        name
        for name in Settings.model_fields
        if name.endswith("_db") and not name.endswith("_read_db")  # replicas: not a plane's own
    }
    assert db_fields == {plane.db_field for plane in PLANE_TABLE.values()}
    for plane in PLANE_TABLE.values():
        if plane.fixed is not None:
            assert plane.fixed.attribute in Settings.model_fields
            assert plane.fixed.variable == f"RATATOSKR_{plane.fixed.attribute.upper()}"
        description = Settings.model_fields[plane.db_field].description or ""
        if plane.postgres is not None:  # the setting's help names the schema the table uses
            assert f"`{plane.postgres.schema}`" in description
        else:
            assert plane.dsn_refused


def test_settings_read_each_planes_database(tmp_path: Path) -> None:
    paths: dict[str, Any] = {
        plane.db_field: str(tmp_path / f"{name}.x") for name, plane in PLANE_TABLE.items()
    }
    settings = Settings(**paths)
    assert tuple(settings.databases()) == PLANES
    for name, plane in PLANE_TABLE.items():
        assert settings.db_path(name) == paths[plane.db_field]


def test_each_fixed_setting_reads_the_field_it_names() -> None:
    for plane in PLANE_TABLE.values():
        if plane.fixed is not None:
            given: dict[str, Any] = {plane.fixed.attribute: 7}
            settings = Settings(**given)
            assert plane.fixed.value(settings) == 7
            assert plane.fixed.wanted(settings) == "7"


@pytest.mark.parametrize("name", PLANES)
def test_a_dsn_is_taken_only_by_a_plane_with_a_postgres_backend(name: str) -> None:
    plane = entry(name)
    dsn: dict[str, Any] = {plane.db_field: DSN}
    if plane.postgres is not None:
        assert Settings(**dsn).db_path(name) == DSN
        return
    with pytest.raises(ValidationError) as caught:
        Settings(**dsn)
    assert caught.value.errors()[0]["type"] == f"{name}_dsn"
    assert "secret" not in str(caught.value)


def test_dev_mode_gives_every_plane_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = dev_settings()
    assert {settings.db_path(name) for name in PLANES} == {
        os.path.join("var", f"{name}.db") for name in PLANES
    }


@pytest.mark.parametrize("name", PLANES)
def test_each_plane_alone_is_served_checked_and_operated(
    settings: Settings, name: str, tmp_path: Path
) -> None:
    plane = entry(name)
    app = build_provider_app(settings, (name,))
    with TestClient(app) as http:
        assert set(app.state.planes.served) == {name}
        ready = http.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["planes"] == {name: "ready"}
        scrape = http.get("/metrics").text
        assert f'ratatoskr_database_file_bytes{{plane="{name}"}}' in scrape
        if plane.count is not None:
            assert f'ratatoskr_index_rows{{plane="{name}"}} 0.0' in scrape
    path = settings.db_path(name)
    assert os.path.exists(token_cache_path(path)) == plane.takes_tokens
    expected = plane_file(settings, name)
    assert expected.schema_version == plane.newest_version(settings) >= 1
    fixed = [plane.fixed.key] if plane.fixed else []
    report = inspect_database(path, plane=name, keys=fixed)
    assert report.schema_version == expected.schema_version
    assert {k: v.value for k, v in expected.meta.items()} == report.meta

    out = io.StringIO()
    assert run_doctor(settings, (name,), out=out) == 0
    assert f"{name} db" in out.getvalue()
    for key in keys_of((name,)):
        assert key.value in out.getvalue()

    out = io.StringIO()
    assert run_stats(settings, (name,), as_json=True, out=out) == 0
    stats = json.loads(out.getvalue())["planes"][name]
    assert stats["schema_version"] == expected.schema_version
    assert ("replay" in stats) == plane.takes_tokens

    out = io.StringIO()
    assert run_compact(settings, (name,), full=False, vectors=True, out=out) == 0
    assert out.getvalue().startswith(f"ratatoskr: {name}: ")

    dest = str(tmp_path / f"{name}.backup")
    if plane.backup_hint is None:
        assert run_backup(settings, name, dest, overwrite=False, out=io.StringIO()) == 0
        assert os.path.exists(dest)
    else:
        with pytest.raises(ConfigError, match="snapshot"):
            run_backup(settings, name, dest, overwrite=False, out=io.StringIO())
        assert not os.path.exists(dest)


def test_the_combined_app_mounts_every_plane(settings: Settings) -> None:
    app = build_provider_app(settings)
    with TestClient(app) as http:
        mounts = {r.path for r in app.routes if isinstance(r, Mount)}
        assert mounts == {f"/{name}" for name in PLANES}
        assert http.get("/readyz").json()["planes"] == dict.fromkeys(PLANES, "ready")
    assert app.state.planes.closed


def test_keys_follow_the_planes_they_guard(settings: Settings) -> None:
    assert keys_of(PLANES) == [k for k in Key if any(p.key is k for p in PLANE_TABLE.values())]
    for name, plane in PLANE_TABLE.items():
        assert keys_of((name,)) == [plane.key]
        assert plane.takes_tokens == (plane.key is Key.HEIMDALL)
    # A plane's key is checked before anything is opened, and nothing is created.
    no_key = settings.model_copy(update={"heimdall_key": None})
    for name, plane in PLANE_TABLE.items():
        if plane.key is Key.HEIMDALL:
            with pytest.raises(ConfigError, match="Heimdall key"):
                open_planes(no_key, (name,))
            assert not os.path.exists(settings.db_path(name))


@pytest.mark.parametrize("command", ["serve", "doctor", "stats", "compact"])
def test_the_command_line_offers_every_plane(command: str) -> None:
    for name in (*PLANES, "all"):
        assert parser().parse_args([command, "--plane", name]).plane == name
    with pytest.raises(SystemExit):
        parser().parse_args([command, "--plane", "nonesuch"])


def test_tokens_are_minted_for_the_token_planes_only() -> None:
    for name, plane in PLANE_TABLE.items():
        args = ["token", "--plane", name, "--verb", "health", "--body", "-"]
        if plane.takes_tokens:
            assert parser().parse_args(args).plane == name
        else:
            with pytest.raises(SystemExit):
                parser().parse_args(args)


def test_the_bifrost_planes_builders_take_one_signature() -> None:
    def shape(builder: Callable[..., object]) -> list[tuple[str, object, object]]:
        parameters = list(inspect.signature(builder).parameters.values())
        # The store's type is the plane's own protocol; every other parameter is shared.
        return [(p.name, p.kind, p.default) for p in parameters[:1]] + [
            (p.name, p.kind, (p.default, p.annotation)) for p in parameters[1:]
        ]

    assert shape(build_memory_provider_app) == shape(build_affect_provider_app)


_SQLITE_ONLY = """
import sys
from ratatoskr.provider import app, cli, doctor, operate, readiness, serving
from ratatoskr.provider.settings import Settings
d = sys.argv[1]
built = app.build_provider_app(Settings(
    memory_db=d + "/m.db", affect_db=d + "/a.db", vmp_db=d + "/v.db",
    heimdall_key="k" * 32, vmp_api_key="v" * 32,
))
print(",".join(sorted(m for m in sys.modules if m.split(".")[0] in ("psycopg", "psycopg_pool"))))
print(",".join(sorted(m for m in sys.modules if m.startswith("ratatoskr.postgres"))))
"""


def test_a_provider_on_sqlite_files_never_loads_the_postgresql_driver(tmp_path: Path) -> None:
    # The PostgreSQL backends are imported when a plane opens on a DSN: every provider,
    # worker and command-line process on SQLite files saves ~0.14 s of CPU.
    done = subprocess.run(
        [sys.executable, "-c", _SQLITE_ONLY, str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["", ""]
    assert (tmp_path / "m.db").exists() and (tmp_path / "a.db").exists()
