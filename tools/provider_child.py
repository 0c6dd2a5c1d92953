"""What ``tools/run_postgres.py`` and ``tools/run_postgres_ha.py`` share: ``ratatoskr
serve --dev`` run as a child on the servers they started, and how Ctrl-C (or SIGTERM)
stops it before they stop their servers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import FrameType

STOP_TIMEOUT = 30.0


class Provider:
    """Handles SIGINT and SIGTERM from its creation (create it before starting any
    server): the first stops the provider once it runs, a second kills it, and
    either one before :meth:`serve` means the provider never starts."""

    def __init__(self) -> None:
        self.stop_requested: list[int] = []
        self._child: subprocess.Popen[bytes] | None = None
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.stop_requested.append(signum)
        child = self._child
        if child is None or child.poll() is not None:
            return
        # The provider runs in a session of its own (a terminal's Ctrl-C reaches only
        # the script), so it hears exactly one stop; a second Ctrl-C kills it.
        if len(self.stop_requested) == 1:
            child.send_signal(signal.SIGTERM)
        else:
            os.killpg(child.pid, signal.SIGKILL)

    def serve(self, env: dict[str, str], serve_args: list[str], name: str) -> int:
        """``ratatoskr serve --dev SERVE-ARGS`` with ``env`` until it exits or is
        stopped; 0 after a requested stop, else its exit status. ``name`` prefixes
        the line that says it stopped."""
        if self.stop_requested:
            return 0
        child = self._child = subprocess.Popen(  # noqa: S603 - this interpreter, the user's arguments
            [sys.executable, "-m", "ratatoskr.provider", "serve", "--dev", *serve_args],
            env=env,
            start_new_session=True,
        )
        if self.stop_requested:  # a signal between the start and the assignment
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
        print(f"{name}: provider stopped; stopping PostgreSQL, deleting its data", flush=True)
        return 0 if self.stop_requested else code
