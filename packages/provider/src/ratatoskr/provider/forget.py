"""``ratatoskr forget``: erase one person (or any scope) from the memory and affect
planes, beside a running provider.

Every chunk and every affect key (with its whole history) whose scope contains the
given axes is erased by the store's own ``forget`` (bounded transactions, see
``ratatoskr.memory.erase`` / ``ratatoskr.affect.erase`` and their PostgreSQL
twins). On SQLite the files hold no byte of what was erased when the command
returns (secure_delete, the index sidecar written again, a truncating
checkpoint); on PostgreSQL the rows are dead tuples until VACUUM
(``--vacuum-full`` rewrites the plane's tables at once: docs/privacy.md).
"""

from __future__ import annotations

import json
import time
from typing import TextIO

from bifrost.errors import InvalidArguments
from bifrost.scope import validate_record_scope
from ratatoskr.provider.pgoperate import pg_vacuum_full
from ratatoskr.provider.portable import open_store
from ratatoskr.provider.settings import ConfigError, Plane, Settings, is_dsn

FORGET_PLANES: tuple[Plane, ...] = ("memory", "affect")


def parse_scope(text: str) -> dict[str, str]:
    """The ``--scope`` JSON: a non-empty object of lattice axes to non-empty strings
    (validated like a scope grant). Raises ConfigError naming the flag, never a value."""
    try:
        scope = json.loads(text)
    except json.JSONDecodeError:
        raise ConfigError("--scope: not a JSON object") from None
    if not isinstance(scope, dict):
        raise ConfigError("--scope: not a JSON object")
    if not scope:
        raise ConfigError("--scope: give at least one axis (an empty scope would be every record)")
    try:
        return validate_record_scope(scope, "--scope")
    except InvalidArguments as exc:
        raise ConfigError(f"--scope: {exc.message}") from None


def run_forget(
    settings: Settings,
    planes: tuple[Plane, ...],
    scope: dict[str, str],
    *,
    dry_run: bool,
    vacuum_full: bool,
    out: TextIO,
) -> int:
    """Erase (or with ``dry_run`` count) on each of ``planes``, one line per plane."""
    for plane in planes:
        start = time.perf_counter()
        with open_store(settings, plane, create=False) as store:
            count = store.forget(scope, dry_run=dry_run)
        if vacuum_full and not dry_run and is_dsn(settings.db_path(plane)):
            pg_vacuum_full(settings, plane)
        what = "chunks" if plane == "memory" else "keys"
        verb = "would erase" if dry_run else "erased"
        out.write(
            f"ratatoskr: {plane}: {verb} {count} {what} ({time.perf_counter() - start:.2f} s)\n"
        )
    return 0
