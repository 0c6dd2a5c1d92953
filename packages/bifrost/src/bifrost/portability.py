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

- a memory chunk whose ``written_at`` is already expired under the store's
  retention (:mod:`bifrost.memory.retention`) is skipped and counted as
  ``expired``: an import never brings back what the destination would hide;
- an id the store does not hold, or holds only as an expired chunk (absent to
  every verb), is written with the imported revision;
- an id held with the same record (canonical JSON, so ``1`` and ``1.0`` differ)
  at the imported revision or a later one — for an affect key, the same
  history, stamps included, its newest revision numbered the same or later —
  is skipped: a second import of one file changes nothing;
- an id held otherwise is a conflict, decided by ``on_conflict``: ``fail`` (the
  default) raises :class:`ImportConflict` and nothing of the batch is written,
  ``skip`` keeps what the store holds, ``replace`` writes the imported record
  (its history) over it, numbered above what it overwrites (``max(imported,
  held + 1)``: a client's ``expected_revisions`` sees the change). A replace
  that would move a record to another scope raises :class:`ImportScopeChange`
  unless ``allow_scope_change``: a file must not re-home one tenant's record
  in another by accident.

Every error names an entry by its index in the batch, never by its content.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from bifrost.affect.validation import ValidatedAffect, validate_put
from bifrost.errors import BifrostError, InvalidArguments
from bifrost.jsoncodec import canonical_json
from bifrost.memory.retention import is_expired
from bifrost.memory.validation import ValidatedChunk, validate_upsert
from bifrost.writes import WriteRequest

__all__ = [
    "ON_CONFLICT",
    "ExportedChunk",
    "ExportedKey",
    "Held",
    "ImportConflict",
    "ImportOutcome",
    "ImportPlan",
    "ImportScopeChange",
    "ImportedChunks",
    "ImportedKey",
    "ImportedKeys",
    "OnConflict",
    "Revision",
    "expired_entries",
    "plan_import",
    "same_history",
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


class ImportScopeChange(
    BifrostError, code="import_scope_change", status=409, plane=True, on_wire=False
):
    """A ``replace`` would move the record held under an entry's id to another scope
    (another tenant, end user, ...), and the import was not told it may: nothing of
    the batch was written. ``index`` is the entry's position in its batch."""

    def __init__(self, index: int) -> None:
        super().__init__(
            f"entry {index}: replacing would move the record held under its id to another"
            " scope (--allow-scope-change permits it)",
            {"index": index},
        )
        self.index = index


@dataclass(frozen=True)
class ImportOutcome:
    """What an import batch did: entries written new, skipped (already there, or
    conflicting under ``skip``), written over a different one (``replace``) and
    skipped as already expired under the destination's retention."""

    written: int = 0
    skipped: int = 0
    replaced: int = 0
    expired: int = 0

    def __add__(self, other: ImportOutcome) -> ImportOutcome:
        return ImportOutcome(
            self.written + other.written,
            self.skipped + other.skipped,
            self.replaced + other.replaced,
            self.expired + other.expired,
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


_Step = tuple[int, str, str]  # (revision, canonical record, recorded_at)


def same_history(held: Sequence[_Step], imported: Sequence[_Step]) -> bool:
    """Whether an affect key's ``held`` history is the ``imported`` one: the same
    revisions, records and stamps, except that the newest may be numbered later (what
    a ``replace`` writes, see :func:`plan_import`)."""
    if len(held) != len(imported) or not held:
        return False
    (rev, text, at), (mine, my_text, my_at) = held[-1], imported[-1]
    return list(held[:-1]) == list(imported[:-1]) and (text, at) == (my_text, my_at) and rev >= mine


def expired_entries(batch: ImportedChunks, cutoff: float | None) -> set[int]:
    """The indexes of ``batch`` whose ``written_at`` is expired under ``cutoff`` (the
    destination's, read inside the import's transaction; None: nothing expires)."""
    if cutoff is None:
        return set()
    return {i for i, at in enumerate(batch.written_at) if is_expired(at, cutoff)}


@dataclass(frozen=True)
class Held:
    """What a store holds under an id of an import batch, as :func:`plan_import` needs
    it: whether it is exactly the imported entry (``same``: see the module
    docstring), its current revision, whether the imported entry's scope differs
    from it, and whether it is expired under the store's retention (then it is
    absent: written over as new)."""

    same: bool
    revision: int
    rescoped: bool
    expired: bool = False


@dataclass(frozen=True)
class ImportPlan:
    """What a store writes of a batch: the indexes to insert (ids it does not hold),
    those to write over what it holds, the revision each written entry gets (by
    index) and the outcome."""

    new: list[int]
    over: list[int]
    revisions: dict[int, int]
    outcome: ImportOutcome


def plan_import(
    ids: Sequence[str],
    revisions: Sequence[int],
    held: Mapping[str, Held],
    on_conflict: OnConflict,
    *,
    expired: Collection[int] = (),
    allow_scope_change: bool = False,
) -> ImportPlan:
    """The one decision on a batch inside its transaction (the rules of the module
    docstring): ``ids`` and their imported ``revisions`` in batch order, ``held``
    what the store holds under them, ``expired`` the indexes whose entries are
    already expired under the store's retention.

    Raises ImportConflict under ``fail``, ImportScopeChange for a rescoping
    ``replace`` without ``allow_scope_change`` (each naming the first index)."""
    new: list[int] = []
    over: list[int] = []
    numbers: dict[int, int] = {}
    skipped = written = replaced = 0
    for i, rid in enumerate(ids):
        h = held.get(rid)
        if i in expired:
            continue
        if h is None or h.expired:
            (new if h is None else over).append(i)
            numbers[i] = revisions[i]
            written += 1
        elif h.same or on_conflict == "skip":
            skipped += 1
        elif on_conflict == "fail":
            raise ImportConflict(i)
        elif h.rescoped and not allow_scope_change:
            raise ImportScopeChange(i)
        else:
            over.append(i)
            numbers[i] = max(revisions[i], h.revision + 1)
            replaced += 1
    return ImportPlan(
        new, over, numbers, ImportOutcome(written, skipped, replaced, len(set(expired)))
    )
