"""The ``ratatoskr`` command: ``serve``, ``token``, ``doctor``, ``backup``, ``restore``,
``stats``, ``compact``, ``export``, ``import``, ``forget``, ``mcp``.

Every configuration problem ends the command with one line on stderr naming
the setting, and exit status 2; nothing is opened before the checks pass. A
valid backup or restore whose work fails (a full disk) is one line and status 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from bifrost.portability import ON_CONFLICT
from ratatoskr.provider.devmode import DEV_HOST, dev_settings
from ratatoskr.provider.doctor import run_doctor
from ratatoskr.provider.export import run_export
from ratatoskr.provider.forget import FORGET_PLANES, run_forget
from ratatoskr.provider.import_ import run_import
from ratatoskr.provider.mint import mint_checked
from ratatoskr.provider.operate import (
    OperationFailed,
    run_backup,
    run_compact,
    run_restore,
    run_stats,
)
from ratatoskr.provider.portable import PORTABLE_PLANES, parse_scope
from ratatoskr.provider.registry import PLANE_TABLE, PLANES
from ratatoskr.provider.serving import bind_socket, configure_logging, serve
from ratatoskr.provider.settings import (
    ConfigError,
    Plane,
    Settings,
    unknown_variables,
)
from ratatoskr.provider.startup import announce, data_line, version_line

__all__ = ["EXIT_CONFIG", "bind_socket", "load_settings", "main", "parser"]

EXIT_CONFIG = 2
EXIT_FAILED = 1


def load_settings(dev: bool, flags: dict[str, str] | None = None, **overrides: Any) -> Settings:
    """Settings from the environment (and ``--dev`` defaults); one-line errors. A
    ``RATATOSKR_*`` variable that is no setting is refused too. ``flags`` maps an
    overridden field to the flag that set it (``{"port": "--port"}``): an error in
    that value blames the flag, not the variable."""
    unknown = unknown_variables(dict(os.environ))
    if unknown:
        raise ConfigError(unknown[0])
    try:
        return dev_settings(**overrides) if dev else Settings(**overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = "_".join(str(p) for p in first["loc"])
        # A model-level check has no field and names the variables in its own words.
        message = str(first["msg"]).removeprefix("Value error, ")
        if not field:
            raise ConfigError(message) from None
        named = (flags or {}).get(field, f"RATATOSKR_{field.upper()}")
        raise ConfigError(f"{named}: {message}") from None


# The planes whose calls carry a Heimdall token `ratatoskr token` can mint.
TOKEN_PLANES: tuple[Plane, ...] = tuple(p for p, e in PLANE_TABLE.items() if e.takes_tokens)


def _planes(choice: str) -> tuple[Plane, ...]:
    if choice == "all":
        return PLANES
    return tuple(p for p in PLANES if p == choice)


def cmd_serve(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {}
    flags: dict[str, str] = {}
    for name in ("host", "port", "workers"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
            flags[name] = f"--{name}"
    settings = load_settings(args.dev, flags, **overrides)
    asked, host = ("--host", args.host) if args.host else ("RATATOSKR_HOST", _env_host())
    if args.dev and host not in (None, DEV_HOST):
        print(
            f"ratatoskr: --dev serves on {DEV_HOST} only; {asked}={host} is ignored "
            "(drop --dev, and set a key, to listen beyond this machine)",
            file=sys.stderr,
            flush=True,
        )
    if args.dev:
        settings = settings.model_copy(update={"host": DEV_HOST})
    planes = _planes(args.plane)
    # Database files hold what agents remember about people: owner-only by default.
    os.umask(0o077)
    configure_logging(settings)
    sock = bind_socket(settings.host, settings.port)
    host, port = sock.getsockname()[:2]
    base = f"http://{host}:{port}"
    where = ", ".join(f"{p} at {base}/{p}" for p in planes) if len(planes) > 1 else base
    try:
        data = data_line(settings, planes)
        return serve(settings, planes, sock, announce=lambda: announce(args.dev, where, base, data))
    finally:
        sock.close()


def _env_host() -> str | None:
    return os.environ.get("RATATOSKR_HOST")


def cmd_token(args: argparse.Namespace) -> int:
    """Mint a token, refusing first whatever the provider would refuse it for
    (:mod:`ratatoskr.provider.mint`)."""
    print(mint_checked(load_settings(args.dev), args))
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


def cmd_export(args: argparse.Namespace) -> int:
    settings = load_settings(args.dev)
    os.umask(0o077)  # an export holds personal data: owner-only
    return run_export(settings, args.plane, args.to, args.scope)


def cmd_import(args: argparse.Namespace) -> int:
    settings = load_settings(args.dev)
    os.umask(0o077)  # a database file the import creates stays owner-only
    return run_import(
        settings,
        args.plane,
        args.source,
        args.on_conflict,
        allow_scope_change=args.allow_scope_change,
    )


def cmd_stats(args: argparse.Namespace) -> int:
    settings = load_settings(args.dev)
    return run_stats(settings, _planes(args.plane), as_json=args.json, out=sys.stdout)


def cmd_forget(args: argparse.Namespace) -> int:
    settings = load_settings(args.dev)
    scope = parse_scope(args.scope, at_least_one=True)
    planes = FORGET_PLANES if args.plane == "all" else (args.plane,)
    return run_forget(
        settings, planes, scope, dry_run=args.dry_run, vacuum_full=args.vacuum_full, out=sys.stdout
    )


_DEV_DATA = "the --dev databases in var/"
Option = tuple[tuple[str, ...], dict[str, Any]]


def _opt(*flags: str, **settings: Any) -> Option:
    """One ``add_argument`` call, as data."""
    return flags, settings


_ALL_PLANES = _opt("--plane", choices=["all", *PLANES], default="all")
_ONE_PLANE = _opt("--plane", choices=PLANES, required=True, help="memory or affect")


def _command(
    sub: Any,
    name: str,
    run: Any,
    *options: Option,
    dev: str | None = _DEV_DATA,
    **about: str,
) -> None:
    """The subcommand ``name`` (``about``: its help and description): its ``options``,
    then ``--dev`` (``dev``: its help); ``run`` runs it."""
    command = sub.add_parser(name, **about)
    for flags, settings in options:
        command.add_argument(*flags, **settings)
    command.add_argument("--dev", action="store_true", help=dev)
    command.set_defaults(func=run)


def _mcp_command(sub: Any) -> None:
    """``ratatoskr mcp``: the MCP memory server of packages/mcp (its options and start)."""
    from ratatoskr.mcp import cli as mcp_cli  # noqa: PLC0415 - only this command needs it

    mcp = sub.add_parser(
        "mcp", help="an MCP memory server (stdio; --http)", description=mcp_cli.DESCRIPTION
    )
    mcp_cli.add_arguments(mcp)
    mcp.set_defaults(func=mcp_cli.run)


def _serve_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--dev", action="store_true", help=f"zero-configuration local mode (on {DEV_HOST} only)"
    )
    serve.add_argument("--host", help="overrides RATATOSKR_HOST (ignored with --dev)")
    serve.add_argument("--port", type=int, help="overrides RATATOSKR_PORT (0: any free port)")
    serve.add_argument("--workers", type=int, help="overrides RATATOSKR_WORKERS")


def _token_command(sub: Any) -> None:
    _command(
        sub,
        "token",
        cmd_token,
        _opt("--plane", choices=TOKEN_PLANES, required=True),
        _opt("--verb", required=True, help="the body's verb (e.g. search)"),
        _opt("--body", required=True, help="file holding the exact body ('-': stdin)"),
        _opt("--actor", default="dev", help="the `sub` claim"),
        _opt(
            "--scope",
            default="{}",
            help="the grant, a JSON object of scope axes (end_user, group, tenant, agent_self), "
            'e.g. \'{"tenant": "acme"}\'; the default {} restricts nothing: the token reaches '
            "every tenant's records",
        ),
        _opt(
            "--lifetime",
            type=int,
            default=60,
            help="seconds, 1 to RATATOSKR_TOKEN_MAX_LIFETIME_S (300 by default)",
        ),
        dev="use the development key",
        help="mint a per-dispatch token for a request body",
    )


def _operator_commands(sub: Any) -> None:
    """``doctor``, ``backup``, ``restore``, ``stats`` and ``compact``."""
    _command(
        sub,
        "doctor",
        cmd_doctor,
        _ALL_PLANES,
        dev=None,
        help="check driver, extension, databases and keys",
    )
    _command(
        sub,
        "backup",
        cmd_backup,
        _ONE_PLANE,
        _opt("--to", required=True, metavar="FILE", help="the copy (created 0600)"),
        _opt("--overwrite", action="store_true", help="replace FILE if it exists"),
        help="a verified online copy of a plane's database",
    )
    _command(
        sub,
        "restore",
        cmd_restore,
        _ONE_PLANE,
        _opt("--from", dest="source", required=True, metavar="FILE"),
        help="replace a plane's database with a backup",
    )
    _command(
        sub,
        "stats",
        cmd_stats,
        _ALL_PLANES,
        _opt("--json", action="store_true", help="one JSON object"),
        help="rows, ledger, tombstones and sizes per plane",
    )
    _command(
        sub,
        "compact",
        cmd_compact,
        _ALL_PLANES,
        _opt("--full", action="store_true", help="SQLite: one VACUUM, not steps"),
        _opt(
            "--no-vectors",
            action="store_true",
            help="memory: free pages only, no vector-table rebuild (writers never wait long)",
        ),
        help="give freed pages back (beside a running provider)",
        description="A SQLite plane: give its file's free pages back to the filesystem. A "
        "PostgreSQL plane: VACUUM (ANALYZE) of its schema's tables (dead rows' space made "
        "reusable, statistics refreshed; files are not shrunk: that is VACUUM FULL, which "
        "locks each table).",
    )


def _portability_commands(sub: Any) -> None:
    """``export`` and ``import``."""
    _command(
        sub,
        "export",
        cmd_export,
        _opt("--plane", choices=PORTABLE_PLANES, required=True),
        _opt("--to", required=True, metavar="FILE", help="the file (created 0600), '-': stdout"),
        _opt(
            "--scope", help='only records whose scope holds these axes, e.g. \'{"end_user": "u1"}\''
        ),
        help="a plane's records as JSON Lines (beside a running provider)",
        description="Write every chunk (memory: the record as written, its revision and write "
        "time) or every key (affect: its whole history) as JSON Lines after one header line, "
        "in id order. Moving to PostgreSQL: export, then import with the DSN configured.",
    )
    _command(
        sub,
        "import",
        cmd_import,
        _opt("--plane", choices=PORTABLE_PLANES, required=True),
        _opt("--from", dest="source", required=True, metavar="FILE", help="'-': stdin"),
        _opt(
            "--on-conflict",
            choices=ON_CONFLICT,
            default="fail",
            help="a different record held under an imported id: fail (the default: that batch "
            "is refused and the import stops), skip (keep it), replace (overwrite it, numbered "
            "above the revision it overwrites)",
        ),
        _opt(
            "--allow-scope-change",
            action="store_true",
            help="let --on-conflict replace move a held record to the scope the file gives it "
            "(another tenant, end user, ...); without it such a batch is refused and the "
            "import stops",
        ),
        help="load an export into the configured store (safe to run again)",
        description="Check the whole file first (nothing is written on a refusal), then write "
        "it in atomic batches, keeping revisions, write times and histories; records already "
        "there are skipped, and so are chunks already expired under the retention. An "
        "operator's action: it bypasses every tenant's grant and quota, so import only files "
        "you trust.",
    )


def _forget_command(sub: Any) -> None:
    _command(
        sub,
        "forget",
        cmd_forget,
        _opt(
            "--scope",
            required=True,
            help='axes the records\' scope holds, e.g. \'{"end_user": "u1"}\'',
        ),
        _opt("--plane", choices=["all", *FORGET_PLANES], default="all"),
        _opt("--dry-run", action="store_true", help="count only, erase nothing"),
        _opt(
            "--vacuum-full",
            action="store_true",
            help="PostgreSQL: VACUUM FULL the plane's tables afterwards (locks them while it runs)",
        ),
        help="erase every record of a scope, e.g. one end user (beside a running provider)",
        description="Erase every chunk and every affect key (with its whole history) whose "
        "scope contains the given axes. SQLite: no byte of them is left in the plane's files "
        "when it returns. PostgreSQL: dead rows until VACUUM (see --vacuum-full).",
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ratatoskr", description="Ratatoskr memory provider.")
    p.add_argument("--version", action="version", version=version_line())
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the provider (uvicorn)")
    serve.add_argument("--plane", choices=["all", *PLANES], default="all")
    _serve_options(serve)
    serve.set_defaults(func=cmd_serve)
    _token_command(sub)
    _operator_commands(sub)
    _portability_commands(sub)
    _forget_command(sub)
    _mcp_command(sub)
    return p


def main(
    argv: Sequence[str] | None = None, *, arguments: argparse.ArgumentParser | None = None
) -> int:
    args = (arguments or parser()).parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"ratatoskr: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except OperationFailed as exc:
        print(f"ratatoskr: {exc}", file=sys.stderr)
        return EXIT_FAILED


def one_plane_parser(plane: Plane) -> argparse.ArgumentParser:
    """``ratatoskr-<plane>-provider``: ``ratatoskr serve --plane <plane>`` under its own
    name (its ``--help`` says so)."""
    p = argparse.ArgumentParser(
        prog=f"ratatoskr-{plane}-provider",
        description=f"Serve the {plane} plane alone (ratatoskr serve --plane {plane}).",
    )
    p.add_argument("--version", action="version", version=version_line())
    _serve_options(p)
    p.set_defaults(func=cmd_serve, plane=plane)
    return p


def memory_main(argv: Sequence[str] | None = None) -> int:
    """``ratatoskr-memory-provider``: the memory plane alone."""
    return main(argv, arguments=one_plane_parser("memory"))


def affect_main(argv: Sequence[str] | None = None) -> int:
    """``ratatoskr-affect-provider``: the affect plane alone."""
    return main(argv, arguments=one_plane_parser("affect"))
