"""What ``ratatoskr serve`` says as it starts: where each plane's data is, the
development-mode hint (with the command as the user ran it), and the version line."""

from __future__ import annotations

import importlib.metadata
import os
import shlex
import shutil
import sys
from pathlib import Path

import bifrost
from bifrost.envelope import WIRE_VERSION
from ratatoskr.provider.registry import entry
from ratatoskr.provider.settings import Plane, Settings, is_dsn, redact_dsn
from ratatoskr.sqlite import MEMORY_PATH

__all__ = ["announce", "command_hint", "data_line", "version_line"]


def data_line(settings: Settings, planes: tuple[Plane, ...]) -> str:
    """Where each plane's data really is (an absolute file, or the DSN with its
    password redacted and the schema), and the Heimdall key's file if one is used."""
    parts = []
    for plane in planes:
        path = settings.db_path(plane)
        schema = entry(plane).postgres
        if is_dsn(path):
            shown = redact_dsn(path) + (f" (schema {schema.schema})" if schema else "")
        elif path == MEMORY_PATH:
            shown = f"{MEMORY_PATH} (nothing survives a restart)"
        else:
            shown = os.path.abspath(path)
        parts.append(f"{plane} in {shown}")
    line = "ratatoskr: data: " + ", ".join(parts)
    if settings.heimdall_key_file is not None and any(entry(p).takes_tokens for p in planes):
        line += f"; Heimdall key in {os.path.abspath(settings.heimdall_key_file)}"
    return line


def announce(dev: bool, where: str, base: str, data: str) -> None:
    print(f"ratatoskr: serving {where}", flush=True)
    print(data, flush=True)
    if dev:
        print(
            "ratatoskr: development mode (loopback only, a generated key).\n"
            f"  mint a token:  {command_hint()} token --dev --plane memory --verb search "
            "--body body.json\n"
            f'  then:          curl -H "Authorization: Bearer $TOKEN" '
            '-H "Content-Type: application/json" '
            f"--data-binary @body.json {base}/memory/bifrost/memory-call",
            flush=True,
        )


def command_hint() -> str:
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
