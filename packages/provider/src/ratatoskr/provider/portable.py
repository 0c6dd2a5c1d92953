"""The export file of ``ratatoskr export`` / ``import``: JSON Lines, one header line and
one line per record, and what the commands that move or erase a plane's records
share (``--scope``, opening the configured store, a progress counter on a terminal).

Format version 1 (every line canonical JSON: keys sorted, no spaces, UTF-8)::

    {"embedding_dim": 384, "exported_at": "2025-…Z", "format": "ratatoskr-export",
     "plane": "memory", "ratatoskr_version": "0.1.0", "scope": {}, "version": 1}
    {"record": {…as written…}, "revision": 3, "written_at": 1767225600.123456}
    …

The memory plane's header names ``embedding_dim`` (an import into another
dimension is refused); each line is a chunk: the record exactly as it was
written (JSON types kept: ``1`` stays an int, ``1.0`` a float), its revision and
when it was last written (seconds since the epoch; retention counts from it).
The affect plane's lines are keys::

    {"history": [{"record": {…}, "recorded_at": "…Z", "revision": 1}, …],
     "key": "k", "revision": 2}

— every revision it keeps, oldest first; the last is its current state.
``scope`` in the header is the ``--scope`` the export was limited to (``{}``:
the whole plane). Lines are in id (key) order, code-point order. A reader
ignores header fields it does not know; a ``version`` it does not know is
refused.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

from bifrost.errors import InvalidArguments
from bifrost.jsoncodec import canonical_json
from bifrost.scope import validate_record_scope
from ratatoskr.provider.operate import OperationFailed
from ratatoskr.provider.preflight import pg_pool_options
from ratatoskr.provider.registry import entry
from ratatoskr.provider.settings import ConfigError, Plane, Settings, is_dsn
from ratatoskr.sqlite import MEMORY_PATH
from ratatoskr.storage.errors import StorageError

if TYPE_CHECKING:
    from ratatoskr import postgres as pg

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "PORTABLE_PLANES",
    "Progress",
    "encode",
    "header",
    "open_store",
    "parse_scope",
]

FORMAT = "ratatoskr-export"
FORMAT_VERSION = 1
PORTABLE_PLANES: tuple[Plane, ...] = ("memory", "affect")


def encode(obj: dict[str, Any]) -> bytes:
    """One line of the file (canonical JSON and a newline)."""
    return canonical_json(obj) + b"\n"


def parse_scope(
    text: str | None, *, at_least_one: bool = False, malformed: str = ""
) -> dict[str, str]:
    """``--scope``: a JSON object of scope-lattice axes to non-empty strings (``{}``
    when not given); with ``at_least_one``, ``{}`` (every record) is refused. Raises
    ConfigError naming the flag, never a value; ``malformed`` starts the message of an
    object that is not a valid scope (a token's grant: "token scope grant malformed: ")."""
    if text is None:
        return {}
    try:
        scope = json.loads(text)
    except json.JSONDecodeError:
        raise ConfigError("--scope: not a JSON object") from None
    if not isinstance(scope, dict):
        raise ConfigError("--scope: not a JSON object")
    if at_least_one and not scope:
        raise ConfigError("--scope: give at least one axis (an empty scope would be every record)")
    try:
        return validate_record_scope(scope, "--scope")
    except InvalidArguments as exc:
        raise ConfigError(f"{malformed}{exc.message}") from None


def header(settings: Settings, plane: Plane, scope: dict[str, str], now: float) -> dict[str, Any]:
    """The header of an export of ``plane`` made at ``now``."""
    out: dict[str, Any] = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "plane": plane,
        "scope": scope,
        "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "ratatoskr_version": importlib.metadata.version("ratatoskr-provider"),
    }
    if plane == "memory":
        out["embedding_dim"] = settings.memory_embedding_dim
    return out


@contextmanager
def open_store(settings: Settings, plane: Plane, *, create: bool) -> Iterator[Any]:
    """The configured store of ``plane`` (its SQLite file, or its schema on the
    PostgreSQL server), closed on exit. A SQLite file that does not exist is created
    only when ``create``. Raises ConfigError naming the setting."""
    described = entry(plane)
    path = settings.db_path(plane)
    pool: pg.Pool | None = None
    try:
        if is_dsn(path):
            if described.postgres is None:
                raise ConfigError(f"{described.db_setting}: {described.dsn_refused}")
            from ratatoskr import postgres as pg  # noqa: PLC0415 - psycopg only for a DSN

            pool = pg.open_pool(path, pg_pool_options())
            store = described.postgres.open(pool, described.postgres.schema, settings)
        else:
            if path == MEMORY_PATH:
                raise ConfigError(f"{described.db_setting}: {MEMORY_PATH} keeps nothing to move")
            if not create and not os.path.exists(path):
                raise ConfigError(f"{described.db_setting}: {path}: no such file")
            store = described.open_file(path, settings)
    except StorageError as exc:
        if pool is not None:
            pool.close()
        raise ConfigError(f"{described.db_setting}: {exc.message}") from None
    try:
        yield store
    except StorageError as exc:
        raise OperationFailed(f"{plane}: {exc.message}") from None
    finally:
        store.close()
        if pool is not None:
            pool.close()


class Progress:
    """A counter line on stderr, redrawn at most every ``interval`` seconds, only when
    stderr is a terminal (a pipe or a log gets the final line alone)."""

    def __init__(
        self, verb: str, noun: str, *, stream: TextIO | None = None, interval: float = 0.25
    ) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._live = self._stream.isatty()
        self._verb = verb
        self._noun = noun
        self._interval = interval
        self._start = time.monotonic()
        self._shown = self._start
        self.count = 0

    def add(self, n: int) -> None:
        self.count += n
        now = time.monotonic()
        if self._live and now - self._shown >= self._interval:
            self._shown = now
            rate = self.count / max(now - self._start, 1e-9)
            self._stream.write(
                f"\rratatoskr: {self._verb} {self.count:,} {self._noun} ({rate:,.0f}/s)"
            )
            self._stream.flush()

    def clear(self) -> None:
        """Take the counter line off the terminal (the command prints its summary)."""
        if self._live and self.count:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
