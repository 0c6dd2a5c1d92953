"""``ratatoskr import``: load an export (:mod:`ratatoskr.provider.portable`) into the
configured store of a plane.

Two passes. The first reads the whole file and checks it — the header (the
format, a version this release reads, the plane, the memory plane's
``embedding_dim`` against ``RATATOSKR_MEMORY_EMBEDDING_DIM``), every line (JSON,
its fields, its record by the validation an upsert or a put runs), no id twice
— before the store is even opened: a refusal is one line naming the line
number (never its content) and nothing is written. stdin (``-``) is copied to
an anonymous temporary file (owner-only) on the way, to be read again.

The second writes batches of ``RATATOSKR_MAX_BATCH`` records through the store's
``import_chunks`` / ``import_keys`` (:mod:`bifrost.portability`), each batch one
transaction: revisions, write times and affect histories are kept; a record
already held exactly as imported is skipped, so running an import again
changes nothing; a chunk already expired under the destination's
``RATATOSKR_MEMORY_RETENTION_S`` is skipped (counted as expired); a different
record held under an imported id is handled by ``--on-conflict`` (``fail``: that
batch is refused whole and the import stops, earlier batches stay; ``skip``;
``replace``: the record is written numbered above the one it overwrites, and a
replace that would move a record to another scope stops the import the same
way unless ``--allow-scope-change``).

An import is an operator's action on the whole plane that bypasses every
tenant's grant: no token, no grant, no idempotency entry, and per-tenant quotas
do not refuse it (the records count in their tenants' usage from then on, so a
tenant imported past its quota cannot grow until it shrinks below it). Whoever
can write the file decides what every tenant holds: import only files you trust.
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

from bifrost.errors import InvalidArguments
from bifrost.portability import (
    ImportConflict,
    ImportOutcome,
    ImportScopeChange,
    OnConflict,
    validate_chunk_import,
    validate_key_import,
)
from ratatoskr.memory.records import load_json
from ratatoskr.provider.operate import OperationFailed
from ratatoskr.provider.portable import FORMAT, FORMAT_VERSION, Progress, open_store
from ratatoskr.provider.settings import ConfigError, Plane, Settings

__all__ = ["run_import"]

_FIRST = re.compile(r"^entry 0(: )?")
_NESTED = re.compile(r"record 0: ")
# (first line number of the batch, its entries)
_Batch = tuple[int, list[Any]]


def _refused(line: int, why: str) -> OperationFailed:
    return OperationFailed(f"import refused, nothing written: line {line}: {why}")


def _check_header(raw: bytes, settings: Settings, plane: Plane) -> None:
    try:
        head = load_json(raw.decode("utf-8"))
    except ValueError:
        head = None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise _refused(1, "not the header of a ratatoskr export")
    version = head.get("version")
    if version != FORMAT_VERSION:
        shown = version if isinstance(version, int) and not isinstance(version, bool) else "?"
        raise _refused(
            1, f"format version {shown} is not one this release reads ({FORMAT_VERSION})"
        )
    if head.get("plane") != plane:
        theirs = head.get("plane") if head.get("plane") in ("memory", "affect") else "another"
        raise _refused(1, f"an export of the {theirs} plane, not of {plane} (--plane)")
    if plane == "memory":
        dim = head.get("embedding_dim")
        if dim != settings.memory_embedding_dim:
            shown = dim if isinstance(dim, int) and not isinstance(dim, bool) else "?"
            raise _refused(
                1,
                f"embedding_dim {shown} differs from RATATOSKR_MEMORY_EMBEDDING_DIM"
                f" {settings.memory_embedding_dim}",
            )


def _batches(stream: IO[bytes], size: int, copy: IO[bytes] | None) -> Iterator[_Batch]:
    """The entries after the header, parsed, in batches of ``size``; each line also
    written to ``copy`` when given. Raises OperationFailed for a line that is not JSON."""
    batch: list[Any] = []
    first = 2
    for number, raw in enumerate(stream, start=2):
        if copy is not None:
            copy.write(raw)
        try:
            batch.append(load_json(raw.decode("utf-8")))
        except ValueError:
            raise _refused(number, "not a JSON object") from None
        if len(batch) == size:
            yield first, batch
            batch, first = [], number + 1
    if batch:
        yield first, batch


def _validator(settings: Settings, plane: Plane) -> Callable[[list[Any]], Any]:
    if plane == "memory":
        return lambda entries: validate_chunk_import(
            entries, embedding_dim=settings.memory_embedding_dim, max_batch=settings.max_batch
        )
    return lambda entries: validate_key_import(entries, max_batch=settings.max_batch)


def _ids(plane: Plane, batch: Any) -> list[str]:
    return list(batch.request.ids) if plane == "memory" else [k.key for k in batch.keys]


def _validate(validate: Callable[[list[Any]], Any], first: int, entries: list[Any]) -> Any:
    """``validate(entries)``, or the refusal naming the first bad line."""
    try:
        return validate(entries)
    except InvalidArguments:
        pass
    for j, entry in enumerate(entries):
        try:
            validate([entry])
        except InvalidArguments as exc:
            why = _NESTED.sub("record: ", _FIRST.sub("", exc.message))
            raise _refused(first + j, why) from None
    raise _refused(first, "this batch does not validate")  # pragma: no cover - defensive


def _check(stream: IO[bytes], settings: Settings, plane: Plane, copy: IO[bytes] | None) -> int:
    """The first pass (see the module docstring); how many entries the file holds."""
    head = stream.readline()
    if copy is not None:
        copy.write(head)
    if not head.strip():
        raise _refused(1, "no header (an empty file?)")
    _check_header(head, settings, plane)
    validate = _validator(settings, plane)
    seen: dict[str, int] = {}
    total = 0
    for first, entries in _batches(stream, settings.max_batch, copy):
        batch = _validate(validate, first, entries)
        for j, rid in enumerate(_ids(plane, batch)):
            earlier = seen.setdefault(rid, first + j)
            if earlier != first + j:
                raise _refused(first + j, f"the id of line {earlier} again")
        total += len(entries)
    return total


def _stopped(line: int, first: int, why: str) -> OperationFailed:
    return OperationFailed(
        f"import stopped: line {line}: {why}; the {first - 2:,} entries before line"
        f" {first} were imported (each batch is atomic)"
    )


def _load(
    stream: IO[bytes],
    settings: Settings,
    plane: Plane,
    on_conflict: OnConflict,
    allow_scope_change: bool,
) -> tuple[ImportOutcome, float]:
    """The second pass: every batch through the store's import method."""
    stream.readline()
    validate = _validator(settings, plane)
    outcome = ImportOutcome()
    progress = Progress("imported", "chunks" if plane == "memory" else "keys")
    started = time.monotonic()
    with open_store(settings, plane, create=True) as store:
        write = store.import_chunks if plane == "memory" else store.import_keys
        for first, entries in _batches(stream, settings.max_batch, None):
            try:
                outcome += write(
                    validate(entries), on_conflict, allow_scope_change=allow_scope_change
                )
            except ImportConflict as exc:
                progress.clear()
                raise _stopped(
                    first + exc.index,
                    first,
                    "the destination holds a different record under its id (run again with"
                    " --on-conflict skip to keep the destination's, replace to overwrite it)",
                ) from None
            except ImportScopeChange as exc:
                progress.clear()
                raise _stopped(
                    first + exc.index,
                    first,
                    "replacing would move the record held under its id to another scope"
                    " (--allow-scope-change permits it)",
                ) from None
            progress.add(len(entries))
    progress.clear()
    return outcome, time.monotonic() - started


def run_import(
    settings: Settings,
    plane: Plane,
    source: str,
    on_conflict: OnConflict,
    *,
    allow_scope_change: bool = False,
) -> int:
    """Import the export at ``source`` (``-``: stdin) into ``plane``'s configured store.
    Raises ConfigError, OperationFailed."""
    if source == "-":
        with tempfile.TemporaryFile() as spool:  # created 0600, unlinked at once
            total = _check(sys.stdin.buffer, settings, plane, spool)
            spool.seek(0)
            outcome, elapsed = _load(spool, settings, plane, on_conflict, allow_scope_change)
    else:
        try:
            with open(source, "rb") as stream:
                total = _check(stream, settings, plane, None)
                stream.seek(0)
                outcome, elapsed = _load(stream, settings, plane, on_conflict, allow_scope_change)
        except OSError as exc:
            raise ConfigError(f"--from: cannot read {source} ({exc.strerror})") from None
    noun = "chunks" if plane == "memory" else "keys"
    print(
        f"ratatoskr: imported {total:,} {noun} into the {plane} plane in {elapsed:.1f} s:"
        f" {outcome.written:,} new, {outcome.skipped:,} skipped (already there or kept),"
        f" {outcome.replaced:,} replaced"
        + (f", {outcome.expired:,} expired (retention)" if plane == "memory" else ""),
        file=sys.stderr,
    )
    return 0
