"""Moving a plane's records between stores: the rules of an import, once for every
backend (the reference stores, SQLite, PostgreSQL).

An export hands out each record with what only the store knows of it — a memory
chunk's ``revision`` and the time it was last written (``written_at``, seconds
since the epoch: retention counts from it), an affect key's whole history with
each revision's ``recorded_at`` — and an import writes them back as they were,
rather than as new writes: revisions and stamps are kept, no idempotency entry is
recorded (re-running an import is safe on its own, see below) and no token grant
applies (an import is an operator's action on the whole plane).

A batch is validated here before a store opens its transaction: every record by
the very validation an upsert (``validate_upsert``) or a put (``validate_put``)
runs, plus the store-owned fields. Inside the transaction a store reads what it
holds under the batch's ids and asks :func:`plan_import` what to write:

- an id the store does not hold is written;
- an id held with the same revision and the same record (canonical JSON, so
  ``1`` and ``1.0`` differ) — for an affect key, the same history, stamps
  included — is skipped: a second import of one file changes nothing;
- an id held otherwise is a conflict, decided by ``on_conflict``: ``fail`` (the
  default) raises :class:`ImportConflict` and nothing of the batch is written,
  ``skip`` keeps what the store holds, ``replace`` writes the imported record
  (its revision, its history) over it.

Every error names an entry by its index in the batch, never by its content.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from bifrost.affect.validation import ValidatedAffect, validate_put
from bifrost.errors import BifrostError, InvalidArguments
from bifrost.jsoncodec import canonical_json
from bifrost.memory.validation import ValidatedChunk, validate_upsert
from bifrost.writes import WriteRequest

__all__ = [
    "ON_CONFLICT",
    "ExportedChunk",
    "ExportedKey",
    "ImportConflict",
    "ImportOutcome",
    "ImportedChunks",
    "ImportedKey",
    "ImportedKeys",
    "OnConflict",
    "Revision",
    "plan_import",
    "same_record",
    "validate_chunk_import",
    "validate_key_import",
]

OnConflict = Literal["fail", "skip", "replace"]
ON_CONFLICT: tuple[OnConflict, ...] = ("fail", "skip", "replace")
# What the stores write as ``recorded_at`` (bifrost.affect: rfc3339 with microseconds).
_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")
# An import's entries are not a client's call: the key a validation asks for is fixed.
_NO_KEY = "import"


class ImportConflict(BifrostError, code="import_conflict", status=409, plane=True, on_wire=False):
    """The destination holds another record (or history) under an id of the batch, and
    ``on_conflict`` is ``fail``: nothing of the batch was written. ``index`` is the
    entry's position in its batch."""

    def __init__(self, index: int) -> None:
        super().__init__(
            f"entry {index}: the destination holds a different record under its id"
            " (--on-conflict skip keeps it, replace overwrites it)",
            {"index": index},
        )
        self.index = index


@dataclass(frozen=True)
class ImportOutcome:
    """What an import batch did: entries written new, skipped (already there, or
    conflicting under ``skip``) and written over a different one (``replace``)."""

    written: int = 0
    skipped: int = 0
    replaced: int = 0

    def __add__(self, other: ImportOutcome) -> ImportOutcome:
        return ImportOutcome(
            self.written + other.written,
            self.skipped + other.skipped,
            self.replaced + other.replaced,
        )


@dataclass(frozen=True)
class ExportedChunk:
    """A memory chunk as an export reads it: the record as written, its revision and
    when it was last written (seconds since the epoch)."""

    chunk_id: str
    record: dict[str, Any]
    revision: int
    written_at: float


@dataclass(frozen=True)
class ExportedKey:
    """An affect key as an export reads it: its current revision and its whole history,
    oldest first, as ``(revision, record, recorded_at)``."""

    key: str
    revision: int
    history: tuple[tuple[int, dict[str, Any], str], ...]


def _revision(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArguments(f"{where}: revision must be an integer >= 1")
    return value


def _entry(value: object, index: int, fields: frozenset[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidArguments(f"entry {index}: must be an object")
    extra = set(value) - fields
    missing = fields - set(value)
    if extra or missing:
        raise InvalidArguments(f"entry {index}: must hold exactly {', '.join(sorted(fields))}")
    return value


_CHUNK_FIELDS = frozenset({"record", "revision", "written_at"})
_KEY_FIELDS = frozenset({"key", "revision", "history"})
_REVISION_FIELDS = frozenset({"record", "revision", "recorded_at"})


@dataclass(frozen=True)
class ImportedChunks:
    """A validated memory import batch: the records as an upsert validates them
    (``request``, in batch order) with each one's ``revisions`` and ``written_at``."""

    request: WriteRequest[ValidatedChunk]
    revisions: tuple[int, ...]
    written_at: tuple[float, ...]

    def __len__(self) -> int:
        return len(self.revisions)


def validate_chunk_import(
    entries: Sequence[object], *, embedding_dim: int, max_batch: int
) -> ImportedChunks:
    """A memory import batch: each entry ``{"record", "revision", "written_at"}`` with a
    record ``upsert_many`` accepts (no duplicate ids), a revision >= 1 and a finite
    ``written_at`` >= 0. Raises InvalidArguments naming the entry."""
    revisions: list[int] = []
    stamps: list[float] = []
    records: list[Any] = []
    for i, raw in enumerate(entries):
        entry = _entry(raw, i, _CHUNK_FIELDS)
        revisions.append(_revision(entry["revision"], f"entry {i}"))
        stamp = entry["written_at"]
        if isinstance(stamp, bool) or not isinstance(stamp, int | float):
            raise InvalidArguments(f"entry {i}: written_at must be a number")
        if not math.isfinite(stamp) or stamp < 0:
            raise InvalidArguments(f"entry {i}: written_at must be finite and >= 0")
        stamps.append(float(stamp))
        records.append(entry["record"])
    request = validate_upsert(
        records, None, _NO_KEY, None, embedding_dim=embedding_dim, max_batch=max_batch
    )
    return ImportedChunks(request, tuple(revisions), tuple(stamps))


@dataclass(frozen=True)
class Revision:
    """One revision of an imported affect key, as a put validates its record."""

    revision: int
    item: ValidatedAffect
    recorded_at: str


@dataclass(frozen=True)
class ImportedKey:
    """An affect key with its whole history, oldest first (the last is its current
    state)."""

    key: str
    history: tuple[Revision, ...]

    @property
    def current(self) -> Revision:
        return self.history[-1]


@dataclass(frozen=True)
class ImportedKeys:
    """A validated affect import batch, in batch order."""

    keys: tuple[ImportedKey, ...]

    def __len__(self) -> int:
        return len(self.keys)


def validate_key_import(entries: Sequence[object], *, max_batch: int) -> ImportedKeys:
    """An affect import batch: each entry ``{"key", "revision", "history"}``, the history
    a non-empty list of ``{"record", "revision", "recorded_at"}`` in increasing
    revision order ending at ``revision``, each record one ``put_many`` accepts for
    that key, each stamp as the stores write them; no key twice. Raises
    InvalidArguments naming the entry."""
    if len(entries) > max_batch:
        raise InvalidArguments(f"entries: {len(entries)} exceeds max_batch {max_batch}")
    keys: list[ImportedKey] = []
    seen: set[str] = set()
    for i, raw in enumerate(entries):
        entry = _entry(raw, i, _KEY_FIELDS)
        where = f"entry {i}"
        current = _revision(entry["revision"], where)
        history = entry["history"]
        if not isinstance(history, list) or not history:
            raise InvalidArguments(f"{where}: history must be a non-empty list")
        revs: list[Revision] = []
        for j, rev_raw in enumerate(history):
            at = f"{where}: history {j}"
            rev = _entry(rev_raw, j, _REVISION_FIELDS)
            number = _revision(rev["revision"], at)
            if revs and number <= revs[-1].revision:
                raise InvalidArguments(f"{at}: revisions must increase")
            stamp = rev["recorded_at"]
            if not isinstance(stamp, str) or not _STAMP.fullmatch(stamp):
                raise InvalidArguments(f"{at}: recorded_at must be RFC 3339 UTC with microseconds")
            try:
                item = validate_put([rev["record"]], None, _NO_KEY, None, max_batch=1)[0]
            except InvalidArguments as exc:
                raise InvalidArguments(f"{at}: {exc.message}") from None
            if revs and item.key != revs[0].item.key:
                raise InvalidArguments(f"{at}: key differs from the entry's")
            revs.append(Revision(number, item, stamp))
        key = revs[0].item.key
        if entry["key"] != key:
            raise InvalidArguments(f"{where}: key differs from its records'")
        if revs[-1].revision != current:
            raise InvalidArguments(f"{where}: revision is not its newest history revision")
        if key in seen:
            raise InvalidArguments(f"{where}: duplicate key in this batch")
        seen.add(key)
        keys.append(ImportedKey(key, tuple(revs)))
    return ImportedKeys(tuple(keys))


def same_record(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two records are the same JSON (types included: ``1`` is not ``1.0``)."""
    return canonical_json(dict(a)) == canonical_json(dict(b))


def plan_import(
    ids: Sequence[str], same: Mapping[str, bool], on_conflict: OnConflict
) -> tuple[list[int], list[int], ImportOutcome]:
    """The one decision on a batch inside its transaction: ``ids`` in batch order,
    ``same`` for each id the store holds whether it holds exactly the imported entry.

    Returns the batch indexes to write as new, those to write over what is held,
    and the outcome. Raises ImportConflict (the first conflicting index) under
    ``fail``."""
    new: list[int] = []
    over: list[int] = []
    skipped = 0
    for i, rid in enumerate(ids):
        held = same.get(rid)
        if held is None:
            new.append(i)
        elif held:
            skipped += 1
        elif on_conflict == "fail":
            raise ImportConflict(i)
        elif on_conflict == "skip":
            skipped += 1
        else:
            over.append(i)
    return new, over, ImportOutcome(len(new), skipped, len(over))
