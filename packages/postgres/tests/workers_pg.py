"""Child processes for the two-process and SIGKILL suites, on either backend.

Runs one of the planes' own test workers unchanged — memory's ``crash_writer`` and
``concurrent_worker``, affect's ``crash_writer`` — with its store opened at a
:class:`backends_pg.Place` instead of a SQLite path::

    python -m packages.postgres.tests.workers_pg ROLE BACKEND TARGET SCHEMA ARGS...

ROLE is ``memory-crash``, ``affect-crash`` or ``memory-concurrent``; ARGS are the
worker's own after its database path. On SQLite the worker runs exactly as it
does on its own (TARGET is its path); on PostgreSQL its opener is replaced by the
place's, with a pool of its own (``tombstone_retention``, the SQLite index's
catch-up window, has no PostgreSQL counterpart: every search reads the table).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from .backends_pg import Place

# role: (the worker's module, its opener); imported on use, so a child loads one plane.
ROLES = {
    "memory-crash": ("packages.memory.tests.crash_writer", "open_memory_store"),
    "memory-concurrent": ("packages.memory.tests.concurrent_worker", "open_memory_store"),
    "affect-crash": ("packages.affect.tests.crash_writer", "open_affect_store"),
}


def run(argv: list[str]) -> None:
    role, place, rest = argv[0], Place.from_argv(argv[1:4]), argv[4:]
    name, opener = ROLES[role]
    module = importlib.import_module(name)
    if place.backend == "postgres":

        def open_at_place(_path: str, **limits: Any) -> Any:
            limits.pop("tombstone_retention", None)
            if opener == "open_memory_store":
                return place.open_memory(**limits)
            return place.open_affect(**limits)

        setattr(module, opener, open_at_place)  # the worker looks its opener up at call time
    sys.argv = [str(module.__file__), place.target, *rest]
    module.main()


if __name__ == "__main__":
    run(sys.argv[1:])
