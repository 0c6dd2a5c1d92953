"""The ``ratatoskr`` command: ``serve``, ``token``, ``doctor``, ``backup``, ``restore``,
``stats``.

Every configuration problem ends the command with one line on stderr naming
the setting, and exit status 2; nothing is opened before the checks pass. A
valid backup or restore whose work fails (a full disk) is one line and status 1.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

import bifrost
from bifrost.client import mint_token
from bifrost.envelope import WIRE_VERSION
from ratatoskr.provider.devmode import dev_settings
from ratatoskr.provider.doctor import run_doctor
from ratatoskr.provider.operate import (
    OperationFailed,
    run_backup,
    run_compact,
    run_restore,
    run_stats,
)
from ratatoskr.provider.registry import PLANE_TABLE
from ratatoskr.provider.serving import bind_socket, configure_logging, serve
from ratatoskr.provider.settings import (
    PLANES,
    ConfigError,
    Plane,
    Settings,
    unknown_variables,
)

__all__ = ["EXIT_CONFIG", "bind_socket", "load_settings", "main", "parser"]

EXIT_CONFIG = 2
EXIT_FAILED = 1


def load_settings(dev: bool, **overrides: Any) -> Settings:
    """Settings from the environment (and ``--dev`` defaults); one-line errors. A
    ``RATATOSKR_*`` variable that is no setting is refused too."""
    unknown = unknown_variables(dict(os.environ))
    if unknown:
        raise ConfigError(unknown[0])
    try:
        return dev_settings(**overrides) if dev else Settings(**overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = "_".join(str(p) for p in first["loc"]).upper() or "settings"
        raise ConfigError(f"RATATOSKR_{name}: {first['msg']}") from None


# The planes whose calls carry a Heimdall token `ratatoskr token` can mint.
TOKEN_PLANES: tuple[Plane, ...] = tuple(p for p, e in PLANE_TABLE.items() if e.takes_tokens)


def _planes(choice: str) -> tuple[Plane, ...]:
    if choice == "all":
        return PLANES
    return tuple(p for p in PLANES if p == choice)


def cmd_serve(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {}
    if args.host is not None:
        overrides["host"] = args.host
    if args.port is not None:
        overrides["port"] = args.port
    if args.workers is not None:
        overrides["workers"] = args.workers
    settings = load_settings(args.dev, **overrides)
    if args.dev:
        settings = settings.model_copy(update={"host": "127.0.0.1"})
    planes = _planes(args.plane)
    # Database files hold what agents remember about people: owner-only by default.
    os.umask(0o077)
    configure_logging(settings)
    sock = bind_socket(settings.host, settings.port)
    host, port = sock.getsockname()[:2]
    base = f"http://{host}:{port}"
    where = ", ".join(f"{p} at {base}/{p}" for p in planes) if len(planes) > 1 else base
    try:
        return serve(settings, planes, sock, announce=lambda: _announce(args.dev, where, base))
    finally:
        sock.close()


def _announce(dev: bool, where: str, base: str) -> None:
    print(f"ratatoskr: serving {where}", flush=True)
    if dev:
        print(
            "ratatoskr: development mode - key in var/dev-heimdall.key, databases in var/.\n"
            f"  mint a token:  {_command()} token --dev --plane memory --verb search "
            "--body body.json\n"
            f'  then:          curl -H "Authorization: Bearer $TOKEN" '
            '-H "Content-Type: application/json" '
            f"--data-binary @body.json {base}/memory/bifrost/memory-call",
            flush=True,
        )


def _command() -> str:
    """This CLI as the start-up hint shows it: the path it was started by (relative to
    the current directory when inside it, e.g. ``.venv/bin/ratatoskr``), a bare name
    only when that name is on PATH."""
    argv0 = sys.argv[0] if sys.argv else ""
    if not argv0 or argv0 == "-c" or argv0.endswith("__main__.py"):
        return f"{_shown(Path(sys.executable))} -m ratatoskr.provider"
    path = Path(argv0)
    if path.name.startswith("ratatoskr-"):  # ratatoskr-memory-provider: `token` is ratatoskr's
        path = path.with_name("ratatoskr")
    if os.sep not in argv0:
        return (
            path.name
            if shutil.which(path.name)
            else f"{_shown(Path(sys.executable))} -m ratatoskr.provider"
        )
    return _shown(path)


def _shown(path: Path) -> str:
    absolute = path.absolute()
    try:
        shown = str(absolute.relative_to(Path.cwd()))
    except ValueError:
        shown = str(absolute)
    return shlex.quote(shown if os.sep in shown else f".{os.sep}{shown}")


def version_line() -> str:
    """``ratatoskr --version``: the provider's and bifrost's versions and the wire's."""
    provider = importlib.metadata.version("ratatoskr-provider")
    return f"ratatoskr-provider {provider}, bifrost {bifrost.__version__} (wire {WIRE_VERSION})"


def cmd_token(args: argparse.Namespace) -> int:
    settings = load_settings(args.dev)
    try:
        body = Path(args.body).read_bytes() if args.body != "-" else sys.stdin.buffer.read()
    except OSError as exc:
        raise ConfigError(f"--body: cannot read {args.body} ({exc.strerror})") from None
    try:
        scope = json.loads(args.scope)
    except json.JSONDecodeError:
        raise ConfigError("--scope: not a JSON object") from None
    if not isinstance(scope, dict):
        raise ConfigError("--scope: not a JSON object")
    token = mint_token(
        settings.heimdall_key_bytes(),
        plane=args.plane,
        verb=args.verb,
        body=body,
        actor=args.actor,
        scope=scope,
        issuer=settings.issuer,
        audience=settings.consumer_id,
        lifetime_s=min(args.lifetime, settings.token_max_lifetime_s),
    )
    print(token)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    settings = load_settings(args.dev)
    return run_doctor(settings, _planes(args.plane), out=sys.stdout)


def cmd_backup(args: argparse.Namespace) -> int:
    settings = load_settings(args.dev)
    os.umask(0o077)  # the copy is created 0600 anyway; so is anything SQLite adds beside it
    return run_backup(settings, args.plane, args.to, overwrite=args.overwrite, out=sys.stdout)


def cmd_restore(args: argparse.Namespace) -> int:
    settings = load_settings(args.dev)
    os.umask(0o077)  # whatever SQLite creates beside the restored file stays owner-only
    return run_restore(settings, args.plane, args.source, out=sys.stdout)


def cmd_compact(args: argparse.Namespace) -> int:
    settings = load_settings(args.dev)
    return run_compact(
        settings, _planes(args.plane), full=args.full, vectors=not args.no_vectors, out=sys.stdout
    )


def cmd_stats(args: argparse.Namespace) -> int:
    settings = load_settings(args.dev)
    return run_stats(settings, _planes(args.plane), as_json=args.json, out=sys.stdout)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ratatoskr", description="Ratatoskr memory provider.")
    p.add_argument("--version", action="version", version=version_line())
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the provider (uvicorn)")
    serve.add_argument("--plane", choices=["all", *PLANES], default="all")
    serve.add_argument("--dev", action="store_true", help="zero-configuration local mode")
    serve.add_argument("--host", help="overrides RATATOSKR_HOST")
    serve.add_argument("--port", type=int, help="overrides RATATOSKR_PORT (0: any free port)")
    serve.add_argument("--workers", type=int, help="overrides RATATOSKR_WORKERS")
    serve.set_defaults(func=cmd_serve)
    token = sub.add_parser("token", help="mint a per-dispatch token for a request body")
    token.add_argument("--plane", choices=TOKEN_PLANES, required=True)
    token.add_argument("--verb", required=True)
    token.add_argument("--body", required=True, help="file holding the exact body ('-': stdin)")
    token.add_argument("--actor", default="dev", help="the `sub` claim")
    token.add_argument("--scope", default="{}", help="the grant, a JSON object")
    token.add_argument("--lifetime", type=int, default=60, help="seconds")
    token.add_argument("--dev", action="store_true", help="use the development key")
    token.set_defaults(func=cmd_token)
    doctor = sub.add_parser("doctor", help="check driver, extension, databases and keys")
    doctor.add_argument("--plane", choices=["all", *PLANES], default="all")
    doctor.add_argument("--dev", action="store_true")
    doctor.set_defaults(func=cmd_doctor)
    backup = sub.add_parser("backup", help="a verified online copy of a plane's database")
    backup.add_argument("--plane", choices=PLANES, required=True, help="memory or affect")
    backup.add_argument("--to", required=True, metavar="FILE", help="the copy (created 0600)")
    backup.add_argument("--overwrite", action="store_true", help="replace FILE if it exists")
    backup.add_argument("--dev", action="store_true", help="the --dev databases in var/")
    backup.set_defaults(func=cmd_backup)
    restore = sub.add_parser("restore", help="replace a plane's database with a backup")
    restore.add_argument("--plane", choices=PLANES, required=True, help="memory or affect")
    restore.add_argument("--from", dest="source", required=True, metavar="FILE")
    restore.add_argument("--dev", action="store_true", help="the --dev databases in var/")
    restore.set_defaults(func=cmd_restore)
    stats = sub.add_parser("stats", help="rows, ledger, tombstones and sizes per plane")
    stats.add_argument("--plane", choices=["all", *PLANES], default="all")
    stats.add_argument("--json", action="store_true", help="one JSON object")
    stats.add_argument("--dev", action="store_true", help="the --dev databases in var/")
    stats.set_defaults(func=cmd_stats)
    compact = sub.add_parser("compact", help="give freed pages back (beside a running provider)")
    compact.add_argument("--plane", choices=["all", *PLANES], default="all")
    compact.add_argument("--full", action="store_true", help="one VACUUM instead of steps")
    compact.add_argument(
        "--no-vectors",
        action="store_true",
        help="memory: free pages only, no vector-table rebuild (writers never wait long)",
    )
    compact.add_argument("--dev", action="store_true", help="the --dev databases in var/")
    compact.set_defaults(func=cmd_compact)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"ratatoskr: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except OperationFailed as exc:
        print(f"ratatoskr: {exc}", file=sys.stderr)
        return EXIT_FAILED


def memory_main() -> int:
    """``ratatoskr-memory-provider``: the memory plane alone."""
    return main(["serve", "--plane", "memory", *sys.argv[1:]])


def affect_main() -> int:
    """``ratatoskr-affect-provider``: the affect plane alone."""
    return main(["serve", "--plane", "affect", *sys.argv[1:]])
