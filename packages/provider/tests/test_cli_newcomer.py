"""What a newcomer and an operator trip over (issue 27), through ``cli.main`` in-process
(a subprocess per case costs ~2 s): settings errors blame the right name, ``token``
refuses what the provider would, ``serve --dev`` says where it listens and where the
data is, the one-plane commands name themselves."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import pytest

from ratatoskr.provider import cli, startup
from ratatoskr.provider.settings import Settings

from .conftest import KEY

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def main(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Run:
    """``cli.main(argv)`` in ``tmp_path`` with only the given ``RATATOSKR_*`` variables
    (and a key unless ``key=False``); returns (status, stdout, stderr)."""
    for name in [n for n in os.environ if n.startswith("RATATOSKR_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)

    def run(*argv: str, key: bool = True, **env: str) -> tuple[int, str, str]:
        values = {"HEIMDALL_KEY": KEY} if key else {}
        for name, value in {**values, **env}.items():
            monkeypatch.setenv(f"RATATOSKR_{name}", value)
        capsys.readouterr()
        try:
            status = cli.main(list(argv))
        except SystemExit as exc:  # argparse: --help, a bad choice
            status = int(exc.code or 0)
        out, err = capsys.readouterr()
        return status, out, err

    return run


@pytest.fixture
def body(tmp_path: Path) -> Path:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"wire_version": 1, "call_id": "c", "verb": "search", "args": {}}))
    return path


def one_line(status: int, err: str) -> str:
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# item 5: settings errors name the field / flag that is wrong


def test_port_flag_is_blamed_on_the_flag(main: Run) -> None:
    status, _, err = main("serve", "--port", "99999")
    line = one_line(status, err)
    assert line.startswith("ratatoskr: --port: ") and "65535" in line
    assert "RATATOSKR_PORT" not in line


def test_port_variable_is_blamed_on_the_variable(main: Run) -> None:
    status, _, err = main("serve", PORT="99999")
    assert one_line(status, err).startswith("ratatoskr: RATATOSKR_PORT: ")


def test_key_and_key_file_both_set_names_both_variables(main: Run, tmp_path: Path) -> None:
    status, _, err = main("doctor", HEIMDALL_KEY_FILE=str(tmp_path / "k"))
    line = one_line(status, err)
    assert line == (
        "ratatoskr: set RATATOSKR_HEIMDALL_KEY or RATATOSKR_HEIMDALL_KEY_FILE, not both"
    )


# item 3: `token` refuses what the provider would refuse, in its words, status 2


def test_token_unknown_verb_lists_the_verbs_and_the_closest(main: Run, body: Path) -> None:
    status, out, err = main("token", "--plane", "memory", "--verb", "serch", "--body", str(body))
    line = one_line(status, err)
    assert "--verb: unknown verb 'serch'" in line and "did you mean 'search'?" in line
    assert "upsert_many" in line and out == ""


def test_token_body_of_another_verb_is_refused(main: Run, body: Path) -> None:
    status, out, err = main("token", "--plane", "memory", "--verb", "get", "--body", str(body))
    assert "token minted for another verb" in one_line(status, err) and out == ""


def test_token_scope_with_a_mistyped_axis(main: Run, body: Path) -> None:
    status, out, err = main(
        "token", "--plane", "memory", "--verb", "search", "--body", str(body),
        "--scope", '{"tennant": "acme"}',
    )  # fmt: skip
    line = one_line(status, err)
    assert "token scope grant malformed" in line and "'tennant'" in line
    assert "end_user, group, tenant, agent_self" in line and "acme" not in line
    assert out == ""


@pytest.mark.parametrize(
    ("lifetime", "words"),
    [("0", "not positive"), ("-5", "not positive"), ("400", "exceeds the maximum")],
)
def test_token_lifetime_outside_what_the_provider_accepts(
    main: Run, body: Path, lifetime: str, words: str
) -> None:
    status, out, err = main(
        "token", "--plane", "memory", "--verb", "search", "--body", str(body),
        "--lifetime", lifetime,
    )  # fmt: skip
    line = one_line(status, err)
    assert f"--lifetime: token lifetime is {words}" in line or words in line
    assert out == ""
    if lifetime == "400":
        assert "RATATOSKR_TOKEN_MAX_LIFETIME_S" in line and "300" in line


def test_token_within_the_rules_is_minted_as_asked(main: Run, body: Path) -> None:
    status, out, err = main(
        "token", "--plane", "memory", "--verb", "search", "--body", str(body),
        "--lifetime", "300", "--scope", '{"tenant": "acme"}',
    )  # fmt: skip
    assert status == 0, err
    claims: dict[str, Any] = jwt.decode(out.strip(), options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == 300
    assert claims["bifrost"]["scope"] == {"tenant": "acme"}


def test_token_without_a_key_names_the_variables_and_dev(main: Run, body: Path) -> None:
    status, _, err = main(
        "token", "--plane", "memory", "--verb", "search", "--body", str(body), key=False
    )
    line = one_line(status, err)
    assert "RATATOSKR_HEIMDALL_KEY" in line and "pass --dev" in line
    assert "serve --dev`" not in line.split("pass --dev")[0]  # not "run serve --dev"


# item 2: the default grant is everything, and --help says so


def test_token_help_says_the_default_grant_reaches_every_tenant(main: Run) -> None:
    status, out, _ = main("token", "--help")
    assert status == 0
    flat = " ".join(out.split())
    assert "default {} restricts nothing" in flat and "every tenant's records" in flat


# item 7 and 1: where a dev server listens, where each plane's data is


def test_dev_with_a_public_host_says_it_serves_on_loopback(
    main: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Settings] = []

    def fake_serve(settings: Settings, planes: Any, sock: Any, announce: Any) -> int:
        seen.append(settings)
        announce()
        return 0

    monkeypatch.setattr(cli, "serve", fake_serve)
    monkeypatch.setattr(cli, "configure_logging", lambda settings: None)
    umask = os.umask(0o022)  # serve sets the process's umask: give it back
    try:
        status, out, err = main("serve", "--dev", "--host", "0.0.0.0", "--port", "0", key=False)
    finally:
        os.umask(umask)
    assert status == 0, err
    assert seen[0].host == "127.0.0.1"
    assert "--dev serves on 127.0.0.1 only; --host=0.0.0.0 is ignored" in err
    assert "serving memory at http://127.0.0.1:" in out
    data = next(line for line in out.splitlines() if line.startswith("ratatoskr: data: "))
    for plane in ("memory", "affect", "vmp"):
        assert f"{plane} in {Path.cwd() / 'var' / plane}.db" in data
    assert f"Heimdall key in {Path.cwd() / 'var' / 'dev-heimdall.key'}" in data


def test_data_line_names_a_dsn_without_its_password() -> None:
    settings = Settings(
        memory_db="postgresql://ratatoskr:s3cret@db.example:5432/app",
        affect_db="postgres://u@h/db?password=hunter2&sslmode=require",
        vmp_db=":memory:",
        heimdall_key=KEY,
    )
    line = startup.data_line(settings, ("memory", "affect", "vmp"))
    assert "memory in postgresql://ratatoskr:***@db.example:5432/app (schema ratatoskr_memory)" in (
        line
    )
    assert "affect in postgres://u@h/db?password=***&sslmode=require (schema ratatoskr_affect)" in (
        line
    )
    assert "vmp in :memory:" in line
    assert "s3cret" not in line and "hunter2" not in line


# item 11: the one-plane commands name themselves


@pytest.mark.parametrize("plane", ["memory", "affect"])
def test_one_plane_command_help_prints_its_own_name(
    plane: str, capsys: pytest.CaptureFixture[str]
) -> None:
    entry = cli.memory_main if plane == "memory" else cli.affect_main
    with pytest.raises(SystemExit) as info:
        entry(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: ratatoskr-{plane}-provider ")
    assert "ratatoskr serve" not in out.splitlines()[0]
    assert "--plane" not in out.splitlines()[0]
