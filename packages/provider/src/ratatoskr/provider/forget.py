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

import time
from typing import TextIO

from ratatoskr.provider.portable import open_store
from ratatoskr.provider.settings import Plane, Settings, is_dsn

FORGET_PLANES: tuple[Plane, ...] = ("memory", "affect")


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
        stays: list[str] = []
        if vacuum_full and not dry_run and is_dsn(settings.db_path(plane)):
            from ratatoskr.provider.pgoperate import pg_vacuum_full  # noqa: PLC0415 - psycopg only for a DSN

            stays = pg_vacuum_full(settings, plane)
        what = "chunks" if plane == "memory" else "keys"
        verb = "would erase" if dry_run else "erased"
        out.write(
            f"ratatoskr: {plane}: {verb} {count} {what} ({time.perf_counter() - start:.2f} s)\n"
        )
        for line in stays:  # what the rewrite could not remove (see pgoperate)
            out.write(f"ratatoskr: {plane}: {line}\n")
    return 0
