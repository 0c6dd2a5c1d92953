"""Real server processes for tests and benchmarks, started one way.

:func:`start_serve` runs ``python -m ratatoskr.provider serve …`` — exactly what a user
runs — and :func:`start_app` runs any ASGI app under uvicorn (``python -m
ratatoskr.provider.testing SPEC ARG…``, where ``SPEC`` names a factory as
``package.module:name`` or ``path/to/file.py:name`` and is called with the ``ARG``
strings). Either listens on a free 127.0.0.1 port that the child binds itself (port 0:
no window in which another process takes it), returns once it serves, and gives a
:class:`ServerProcess`: its base URL, every line it wrote to stdout and stderr, and a
way to stop it and every process it started.

The child runs in a process group of its own, so :meth:`ServerProcess.close` can end
workers that outlive their supervisor, and a Ctrl-C meant for the test runner does
not reach it first. Its environment is the caller's without ``RATATOSKR_*`` (a
developer's shell settings never leak into a test), plus ``env``.

What else is shared by tests lives beside the code it serves: envelopes and tokens in
:mod:`bifrost.consumer.testing.helpers`, memory chunks in :mod:`ratatoskr.memory.testing`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
# uvicorn's line once the lifespan (every plane's store open and checked) is done.
STARTED = "Application startup complete"
# What `ratatoskr serve` prints once its socket listens (before uvicorn starts, so a
# connection then waits in the backlog); the first URL in it is the base URL.
ANNOUNCED = "ratatoskr: serving "
# What an app under start_app prints once uvicorn has started serving.
APP_READY = "ratatoskr.provider.testing: serving "
_URL = re.compile(r"http://127\.0\.0\.1:\d+")
# Log levels at which uvicorn never prints STARTED: then the announcement is the signal.
_QUIET = frozenset({"warning", "error", "critical"})


class ServerDidNotStart(RuntimeError):
    """The server exited, or did not get ready in time; the message holds its output."""


def free_port(host: str = HOST) -> int:
    """A port that was free on ``host`` a moment ago (for a server that must be told its
    port in advance; prefer port 0, which the servers here bind themselves)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def child_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without ``RATATOSKR_*``, then ``env`` on top."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("RATATOSKR_")}
    full.update(env or {})
    return full


@dataclass
class ServerProcess:
    """A started server: ``base_url`` (``http://127.0.0.1:PORT``) and ``output``, the
    lines it has written so far (stdout and stderr, in order; still growing)."""

    proc: subprocess.Popen[str]
    base_url: str
    output: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def url(self, plane: str | None = None) -> str:
        """The base URL, or a plane's mount point under it (``…/memory``)."""
        return self.base_url if plane is None else f"{self.base_url}/{plane}"

    def log(self) -> str:
        """Everything the server wrote so far, as one string."""
        return "".join(self.output)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        """Send ``sig`` to the server (not its children: a supervisor stops its own
        workers) and return its exit status; a server still running after ``timeout``
        seconds is SIGKILLed with its whole process group."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._kill_group()
            return self.proc.wait(10)

    def close(self) -> None:
        """Stop the server if it runs (SIGTERM), then SIGKILL whatever is left of its
        process group (workers whose supervisor was killed)."""
        if self.proc.poll() is None:
            self.stop()
        self._kill_group()
        if self.proc.stdout is not None:
            with contextlib.suppress(OSError):
                self.proc.stdout.close()

    def _kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def launch(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | Path,
    ready: Callable[[str], bool],
    timeout: float = 60,
    preexec_fn: Callable[[], None] | None = None,
) -> ServerProcess:
    """Start ``argv`` (with exactly ``env``) in a process group of its own and return
    once a line of its output satisfies ``ready``; the base URL is the first
    ``http://127.0.0.1:PORT`` it printed up to then. ``preexec_fn`` runs in the child
    before it starts (resource limits, say). Raises ServerDidNotStart (after killing
    it) when it exits first, or is not ready within ``timeout`` seconds."""
    proc = subprocess.Popen(  # noqa: S603 - the caller's own command line, no shell
        list(argv),
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        process_group=0,
        preexec_fn=preexec_fn,  # noqa: PLW1509 - the caller's limits only, no threads there
    )
    lines: list[str] = []
    url: list[str] = []
    found = threading.Event()
    ended = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                lines.append(line)
                if not url and (match := _URL.search(line)):
                    url.append(match.group(0))
                if not found.is_set() and url and ready(line):
                    found.set()
        except ValueError:  # the pipe was closed by ServerProcess.close
            pass
        ended.set()

    threading.Thread(target=pump, name=f"output of {proc.pid}", daemon=True).start()
    deadline = time.monotonic() + timeout
    while not found.wait(0.05):
        if ended.is_set() or time.monotonic() > deadline:
            break
    if not found.is_set():
        server = ServerProcess(proc, "", lines)
        server._kill_group()
        proc.wait(10)
        ended.wait(5)
        why = "exited" if proc.returncode not in (None, -signal.SIGKILL) else "was not ready"
        raise ServerDidNotStart(f"{argv[:4]} {why} (status {proc.returncode}):\n{''.join(lines)}")
    return ServerProcess(proc, url[0], lines)


def start_serve(
    args: Sequence[str] = ("serve",),
    env: Mapping[str, str] | None = None,
    cwd: str | Path = ".",
    *,
    timeout: float = 60,
    preexec_fn: Callable[[], None] | None = None,
) -> ServerProcess:
    """``python -m ratatoskr.provider <args>`` (``args`` starts with ``serve``) with
    :func:`child_env` of ``env``, on port 0 unless ``--port`` or ``RATATOSKR_PORT``
    says otherwise. Ready when uvicorn reports the application started — or, at a
    ``RATATOSKR_LOG_LEVEL`` where it never does, when ``ratatoskr serve`` announces
    its URL (its socket already listens). Raises ServerDidNotStart."""
    full = child_env(env)
    argv = [sys.executable, "-m", "ratatoskr.provider", *args]
    if "--port" not in args and "RATATOSKR_PORT" not in full:
        argv += ["--port", "0"]
    quiet = full.get("RATATOSKR_LOG_LEVEL", "info").lower() in _QUIET

    def ready(line: str) -> bool:
        return STARTED in line or (quiet and line.startswith(ANNOUNCED))

    return launch(argv, env=full, cwd=cwd, ready=ready, timeout=timeout, preexec_fn=preexec_fn)


def start_app(
    spec: str,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    cwd: str | Path = ".",
    *,
    timeout: float = 60,
) -> ServerProcess:
    """Serve the ASGI app that ``spec`` (``package.module:factory`` or
    ``path/to/file.py:factory``) returns when called with ``args``, under uvicorn on a
    free 127.0.0.1 port, with :func:`child_env` of ``env``. Ready once uvicorn serves.
    Raises ServerDidNotStart."""
    argv = [sys.executable, "-m", "ratatoskr.provider.testing", spec, *args]
    return launch(
        argv,
        env=child_env(env),
        cwd=cwd,
        ready=lambda line: line.startswith(APP_READY),
        timeout=timeout,
    )


def load_factory(spec: str) -> Callable[..., Any]:
    """The callable that ``spec`` names: ``package.module:name`` or ``file.py:name``.
    Raises ValueError for a spec without ``:``, ImportError or AttributeError."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise ValueError(f"expected MODULE:NAME or FILE.py:NAME, got {spec!r}")
    if where.endswith(".py"):
        path = Path(where).resolve()
        loaded = importlib.util.spec_from_file_location(path.stem, path)
        if loaded is None or loaded.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(loaded)
        loaded.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    factory: Callable[..., Any] = getattr(module, name)
    return factory


def serve_app(spec: str, args: Sequence[str]) -> None:
    """Build the app (:func:`load_factory`), bind 127.0.0.1:0 and serve it until
    SIGTERM or SIGINT, printing :data:`APP_READY` and the URL once uvicorn serves."""
    import uvicorn  # noqa: PLC0415 - only the child needs it

    app = load_factory(spec)(*args)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((HOST, 0))
    sock.listen(128)
    url = f"http://{HOST}:{sock.getsockname()[1]}"

    class Announcing(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                print(f"{APP_READY}{url}", flush=True)

    config = uvicorn.Config(app, log_level="warning", access_log=False)
    Announcing(config).run(sockets=[sock])


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ratatoskr.provider.testing SPEC [ARG…]``: :func:`serve_app`."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m ratatoskr.provider.testing SPEC [ARG...]", file=sys.stderr)
        return 2
    serve_app(args[0], args[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
