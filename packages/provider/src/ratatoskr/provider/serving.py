"""Serving: the listening socket, uvicorn, and the worker processes.

One process (``workers=1``) serves every request on one event loop, with store
calls in its thread pool. ``workers=N`` uses every core: the parent binds the
socket, runs the preflight and opens (creating and migrating) every database
once, closes them again, and then starts N worker processes under uvicorn's
supervisor. Each worker opens its own stores on the same files — SQLite's WAL
and each store's change counter keep them consistent, and the replay cache
beside each plane file keeps a token single-use across all of them — and
accepts connections from the shared socket (the kernel spreads them).

A worker that dies (a crash, the OOM killer, SIGKILL) is reported on the
``ratatoskr.serve`` logger with its exit status and replaced by a new one; a
worker that fails before it starts serving (a database that became unusable)
would fail the same way again, so the server then stops and exits non-zero.
SIGTERM or SIGINT to the parent stops every worker gracefully: each stops
accepting, lets in-flight calls finish and closes its databases.
"""

from __future__ import annotations

import functools
import logging
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess

from ratatoskr.provider.app import build_provider_app
from ratatoskr.provider.planes import open_planes
from ratatoskr.provider.settings import ConfigError, Plane, Settings

__all__ = ["EXIT_WORKER_FAILED", "bind_socket", "configure_logging", "serve"]

_log = logging.getLogger("ratatoskr.serve")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
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


def configure_logging(settings: Settings) -> None:
    """The provider's log format, in the parent and in every worker."""
    logging.basicConfig(level=settings.log_level.upper(), format=LOG_FORMAT)


def _config(app: Any, settings: Settings, **extra: Any) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        log_level=settings.log_level,
        lifespan="on",
        http="httptools",
        loop="uvloop",
        timeout_graceful_shutdown=30,
        access_log=settings.log_level == "debug",
        **extra,
    )


def worker_app(settings: Settings, planes: tuple[Plane, ...]) -> Starlette:
    """The app of one worker process (uvicorn calls it in the worker, after spawn).

    A setting or database that fails here fails the same way in every worker: it
    ends the worker with uvicorn's start-up failure status, which stops the server.
    """
    configure_logging(settings)
    try:
        return build_provider_app(settings, planes)
    except ConfigError as exc:
        _log.error("worker cannot start: %s", exc)
        sys.exit(STARTUP_FAILURE)


class _Supervisor(Multiprocess):
    """uvicorn's supervisor, reporting each worker death with its exit status."""

    startup_failed = False

    def keep_subprocess_alive(self) -> None:
        if not self.should_exit.is_set():
            for process in self.processes:
                code = process.exitcode
                if code is None:
                    continue
                if code == STARTUP_FAILURE:
                    self.startup_failed = True
                    _log.error("worker pid=%s failed to start; stopping the server", process.pid)
                else:
                    _log.warning(
                        "worker pid=%s died (%s); starting a replacement",
                        process.pid,
                        _describe_exit(code),
                    )
        super().keep_subprocess_alive()


def _describe_exit(code: int) -> str:
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
        app = build_provider_app(settings, planes)
        announce()
        uvicorn.Server(_config(app, settings)).run(sockets=[sock])
        return 0
    # Every configuration error is a one-line refusal here, in the parent, and the
    # files are created and migrated once rather than raced by N workers.
    open_planes(settings, planes).close()
    announce()
    factory = functools.partial(worker_app, settings, planes)
    supervisor = _Supervisor(
        _config(factory, settings, factory=True, workers=settings.workers), sockets=[sock]
    )
    supervisor.run()
    return EXIT_WORKER_FAILED if supervisor.startup_failed else 0
