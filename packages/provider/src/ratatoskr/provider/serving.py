"""Serving: the listening socket, uvicorn, and the worker processes.

One process (``workers=1``) serves every request on one event loop, with store
calls in its thread pool. ``workers=N`` uses every core: the parent binds the
socket, runs the preflight and opens (creating and migrating) every database
once, closes them again, and then starts N worker processes under uvicorn's
supervisor. Each worker opens its own stores on the same files — SQLite's WAL
and each store's change counter keep them consistent, and the replay cache
beside each plane file keeps a token single-use across all of them — and
accepts connections from the shared socket (the kernel spreads them).

Connections are bounded by :mod:`ratatoskr.provider.connections` (request heads,
a deadline per request, a connection cap that makes room by closing waiting
connections); here the open-file soft limit is raised to the hard limit at start
and the cap kept below it, so idle and slow sockets cannot exhaust the file
descriptors every plane needs.

A worker that dies (a crash, the OOM killer, SIGKILL) is reported on the
``ratatoskr.serve`` logger with its exit status and replaced by a new one; a
worker that fails before it starts serving (a database that became unusable)
would fail the same way again, so the server then stops and exits non-zero.
The parent keeps each database file (and replay file) open while it serves
(:class:`ratatoskr.sqlite.guard.HeldFiles`) and hands every worker the identities of
each file and its ``-wal``/``-shm`` as found at start: a replacement started after one
of them was removed or replaced refuses every write (503) rather than take the new
file for its own beside a sibling that has the old one open.
SIGTERM, SIGINT or SIGHUP (a closed terminal) stops the server gracefully —
with workers, every one of them: each stops accepting, lets in-flight calls
finish and closes its databases.
"""

from __future__ import annotations

import functools
import logging
import logging.config
import os
import resource
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import uvicorn
from prometheus_client import multiprocess
from starlette.applications import Starlette
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess

from ratatoskr.provider.app import build_provider_app
from ratatoskr.provider.connections import GuardedHttpToolsProtocol, ProviderConfig
from ratatoskr.provider.observe import log_config
from ratatoskr.provider.preflight import OpenPlanes, open_planes
from ratatoskr.provider.registry import entry
from ratatoskr.provider.settings import ConfigError, Plane, Settings, is_dsn
from ratatoskr.sqlite import MEMORY_PATH, SqliteTokenCache, StorageError
from ratatoskr.sqlite.guard import FileSet, HeldFiles, expect_files

__all__ = ["EXIT_WORKER_FAILED", "bind_socket", "configure_logging", "serve"]

_log = logging.getLogger("ratatoskr.serve")
# Where the workers' metric files go (prometheus-client's multi-process mode).
METRICS_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
# The server stopped because a worker could not start.
EXIT_WORKER_FAILED = 1


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind the listening socket before anything else is opened (port in use → ConfigError)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only when
    # the listening socket says it is TCP. Without it Nagle's algorithm and the
    # client's delayed ACK added ~40 ms to every small response.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"RATATOSKR_PORT: cannot listen on {host}:{port} ({exc.strerror})"
        ) from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def tune_interpreter() -> None:
    """Hand the interpreter lock over every 1 ms instead of 5: a heavy call holding it
    then delays a small call's few hand-offs (socket read, thread hop, answer) by
    ~1 ms each rather than ~5 (measured: docs/decisions.md)."""
    sys.setswitchinterval(0.001)


def configure_logging(settings: Settings) -> None:
    """The provider's log format (``RATATOSKR_LOG_FORMAT``), in the parent and in every
    worker; uvicorn gets the same configuration (``_config``)."""
    logging.config.dictConfig(log_config(settings.log_level, settings.log_format))


_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# File descriptors kept free for what is open at start (databases' writers, replay
# files, logs, the loop's own) ...
_FD_RESERVE = 64
# ... and for each plane's readers: one per call thread (40), each a file and its WAL.
# Measured: 34 descriptors idle, 201 after 60 concurrent callers of two planes.
_FDS_PER_PLANE = 2 * 40
# Connections a process keeps room for however low the open-file limit (the
# protocol then also watches the descriptors themselves).
_MIN_CONNECTIONS = 16


def raise_open_file_limit() -> int:
    """Raise this process's soft open-file limit to its hard limit; return the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
    if wanted > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (OSError, ValueError):  # pragma: no cover - a container may forbid it
            pass
    return soft


def connection_cap(settings: Settings, open_files: int, planes: int = 3) -> int:
    """The connections one process may hold: the setting, kept below the open-file limit
    less what ``planes`` planes may need; a warning if the limit is what bounds it."""
    room = open_files - _FD_RESERVE - _FDS_PER_PLANE * planes
    cap = max(_MIN_CONNECTIONS, min(settings.max_connections, room))
    if cap < settings.max_connections:
        _log.warning(
            "the open-file limit (%d) leaves room for %d connections per process, not "
            "RATATOSKR_MAX_CONNECTIONS=%d; raise it (ulimit -n)",
            open_files,
            cap,
            settings.max_connections,
        )
    return cap


# How long the supervisor waits for a worker's answer to its liveness ping before it
# kills the worker as hung. A new worker answers only once spawn has imported the app
# (1-2 s here when idle, past uvicorn's 5 s default on a loaded 2-core host), so the
# default killed healthy workers mid-start; a hung worker is now replaced after 20 s.
WORKER_HEALTHCHECK_TIMEOUT_S = 20


def _config(app: Any, settings: Settings, planes: int, **extra: Any) -> uvicorn.Config:
    open_files = raise_open_file_limit()
    return ProviderConfig(
        app,
        request_timeout_s=settings.request_timeout_s,
        max_connections=connection_cap(settings, open_files, planes),
        open_file_limit=open_files,
        max_head_bytes=settings.max_head_bytes,
        max_headers=settings.max_headers,
        log_level=settings.log_level,
        log_config=log_config(settings.log_level, settings.log_format),
        lifespan="on",
        http=GuardedHttpToolsProtocol,
        loop="uvloop",
        timeout_keep_alive=settings.keep_alive_s,
        timeout_graceful_shutdown=30,
        timeout_worker_healthcheck=WORKER_HEALTHCHECK_TIMEOUT_S,
        access_log=settings.log_level == "debug",
        # uvicorn's ProxyHeadersMiddleware (on by default) rewrote the client address of
        # every request from X-Forwarded-For; nothing here reads the client address (the
        # debug access log aside), and it was ~6% of the server's Python time a call.
        proxy_headers=False,
        **extra,
    )


def _stop_when_orphaned(parent: int) -> None:
    """A worker whose supervisor died (SIGKILL, the OOM killer) stops gracefully instead
    of serving on, unsupervised, with the database files open."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        _log.warning("worker pid=%s: the server process is gone; stopping", os.getpid())
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="ratatoskr-orphan-watch", daemon=True).start()


def worker_app(
    settings: Settings,
    planes: tuple[Plane, ...],
    parent: int,
    files: dict[str, FileSet] | None = None,
) -> Starlette:
    """The app of one worker process (uvicorn calls it in the worker, after spawn);
    ``files``: the database files the parent held at start, the only ones a write of
    this worker may go to.

    A setting or database that fails here fails the same way in every worker: it
    ends the worker with uvicorn's start-up failure status, which stops the server.
    """
    configure_logging(settings)
    tune_interpreter()
    _stop_when_orphaned(parent)
    expect_files(files or {})
    try:
        return build_provider_app(
            settings, planes, metrics_dir=os.environ.get(METRICS_DIR_VARIABLE)
        )
    except ConfigError as exc:
        _log.error("worker cannot start: %s", exc)
        sys.exit(STARTUP_FAILURE)


class _Supervisor(Multiprocess):
    """uvicorn's supervisor, reporting each worker death with its exit status; SIGHUP
    stops it gracefully like SIGTERM (uvicorn's default restarts the workers)."""

    startup_failed = False
    metrics_dir: str | None = None

    def handle_hup(self) -> None:
        _log.info("SIGHUP: stopping gracefully")
        self.should_exit.set()

    def keep_subprocess_alive(self) -> None:
        before = list(self.processes)
        super().keep_subprocess_alive()
        # uvicorn replaced (or, on a start-up failure, dropped) each worker that died;
        # it has been joined by now, so its exit status is known.
        for process in before:
            code = process.exitcode
            if code == STARTUP_FAILURE and not self.startup_failed:
                self.startup_failed = True
                _log.error("worker pid=%s failed to start; stopping the server", process.pid)
            elif process not in self.processes:
                if self.metrics_dir is not None and process.pid is not None:
                    # Its counters stay in the sum; only its live gauges go.
                    multiprocess.mark_process_dead(process.pid, self.metrics_dir)  # type: ignore[no-untyped-call]
                _log.warning(
                    "worker pid=%s died (%s); starting a replacement",
                    process.pid,
                    _describe_exit(code),
                )


def _hold_files(settings: Settings, opened: OpenPlanes) -> HeldFiles:
    """The parent's hold on every database and replay file ``opened`` uses (files only:
    not ``:memory:`` or PostgreSQL). Raises ConfigError when one cannot be opened."""
    paths: list[tuple[str, str]] = []  # (path, the setting that names it)
    for plane, served in opened.served.items():
        path, setting = settings.db_path(plane), entry(plane).db_setting
        if path != MEMORY_PATH and not is_dsn(path):
            paths.append((path, setting))
        if isinstance(served.replay, SqliteTokenCache):
            paths.append((served.replay.path, f"{setting} (its replay cache)"))
    held = HeldFiles([])
    for path, setting in paths:
        try:
            held.add(path)
        except StorageError as exc:
            held.close()
            raise ConfigError(f"{setting}: cannot hold the file open: {exc.message}") from None
    return held


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "hung: killed"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


def serve(
    settings: Settings,
    planes: tuple[Plane, ...],
    sock: socket.socket,
    *,
    announce: Callable[[], None] = lambda: None,
) -> int:
    """Serve ``planes`` on ``sock`` with ``settings.workers`` processes until SIGTERM or
    SIGINT; returns the exit status. ``announce`` runs once the databases are open
    and checked. Raises ConfigError for bad settings, before anything is served."""
    if settings.workers == 1:
        tune_interpreter()
        app = build_provider_app(settings, planes)
        announce()
        server = uvicorn.Server(_config(app, settings, len(planes)))
        # A closed terminal (SIGHUP) stops the server as SIGTERM does, not abruptly.
        previous = signal.signal(signal.SIGHUP, server.handle_exit)
        try:
            server.run(sockets=[sock])
        finally:
            signal.signal(signal.SIGHUP, previous)
        return 0
    # Every configuration error is a one-line refusal here, in the parent, and the
    # files are created and migrated once rather than raced by N workers. The files
    # are held open before the stores close, so they stay the ones found here.
    opened = open_planes(settings, planes)
    try:
        held = _hold_files(settings, opened)
    finally:
        opened.close()
    try:
        return _supervise(settings, planes, sock, held.files, announce)
    finally:
        held.close()


def _supervise(
    settings: Settings,
    planes: tuple[Plane, ...],
    sock: socket.socket,
    files: dict[str, FileSet],
    announce: Callable[[], None],
) -> int:
    """Run the workers under the supervisor until it stops; the exit status."""
    announce()
    # One BLAS thread per worker (unless the operator chose): N workers each running a
    # pool as large as the machine oversubscribe the cores, and a busy machine then
    # made a 0.6 ms VMP search take 54 ms. Spawned workers read this at import.
    for variable in _BLAS_THREADS:
        os.environ.setdefault(variable, "1")
    factory = functools.partial(worker_app, settings, planes, os.getpid(), files)
    supervisor = _Supervisor(
        _config(factory, settings, len(planes), factory=True, workers=settings.workers),
        sockets=[sock],
    )
    # A private, owner-only directory for this server's metric files (never one left
    # by an earlier run: its counts would be summed in); workers inherit the variable.
    metrics_dir = tempfile.mkdtemp(prefix="ratatoskr-metrics-")
    previous_dir = os.environ.get(METRICS_DIR_VARIABLE)
    os.environ[METRICS_DIR_VARIABLE] = metrics_dir
    supervisor.metrics_dir = metrics_dir
    try:
        supervisor.run()
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
        if previous_dir is None:
            os.environ.pop(METRICS_DIR_VARIABLE, None)
        else:
            os.environ[METRICS_DIR_VARIABLE] = previous_dir
    return EXIT_WORKER_FAILED if supervisor.startup_failed else 0
