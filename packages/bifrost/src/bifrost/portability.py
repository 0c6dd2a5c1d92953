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
runs, plus the store-owned fields. Inside its transaction a store hands
:func:`import_chunk_batch` / :func:`import_key_batch` what it holds under the
batch's ids and writes what :func:`plan_import` chose (:class:`ChunkImportTx`,
:class:`KeyImportTx`: its SQL, or its dicts, and nothing else):

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
from dataclasses import astuple, dataclass
from typing import Any, Literal, Protocol

from bifrost.affect.validation import ValidatedAffect, validate_put
from bifrost.errors import BifrostError, InvalidArguments
from bifrost.jsoncodec import canonical_json
from bifrost.memory.retention import is_expired
from bifrost.memory.validation import ValidatedChunk, validate_upsert
from bifrost.writes import WriteRequest

__all__ = [
    "ON_CONFLICT",
    "ChunkImportTx",
    "ExportedChunk",
    "ExportedKey",
    "Held",
    "HeldChunk",
    "History",
    "ImportConflict",
    "ImportOutcome",
    "ImportPlan",
    "ImportScopeChange",
    "ImportedChunks",
    "ImportedKey",
    "ImportedKeys",
    "KeyImportTx",
    "OnConflict",
    "Revision",
    "import_chunk_batch",
    "import_key_batch",
    "plan_import",
    "record_text",
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
        return ImportOutcome(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


@dataclass(frozen=True)
class ExportedChunk:
    """A memory chunk as an export reads it: the record as written, its revision and
    when it was last written (seconds since the epoch)."""

    chunk_id: str
    record: dict[str, Any]
    revision: int
    written_at: float


# An affect key's history as a store reads it, oldest first: (revision, record, recorded_at).
History = tuple[tuple[int, dict[str, Any], str], ...]


@dataclass(frozen=True)
class ExportedKey:
    """An affect key as an export reads it: its current revision and its whole history,
    oldest first, as ``(revision, record, recorded_at)``."""

    key: str
    revision: int
    history: History


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


def record_text(record: Mapping[str, Any]) -> str:
    """A record as the stores keep it: its canonical JSON, as text."""
    return canonical_json(dict(record)).decode("utf-8")


_Step = tuple[int, str, str]  # (revision, canonical record, recorded_at)


def same_history(held: Sequence[_Step], imported: Sequence[_Step]) -> bool:
    """Whether an affect key's ``held`` history is the ``imported`` one: the same
    revisions, records and stamps, except that the newest may be numbered later (what
    a ``replace`` writes, see :func:`plan_import`)."""
    if len(held) != len(imported) or not held:
        return False
    (rev, text, at), (mine, my_text, my_at) = held[-1], imported[-1]
    return list(held[:-1]) == list(imported[:-1]) and (text, at) == (my_text, my_at) and rev >= mine


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


@dataclass(frozen=True)
class HeldChunk:
    """A chunk a store holds under an id of an import batch: its record as written,
    its revision and when it was last written (seconds since the epoch)."""

    record: Mapping[str, Any]
    revision: int
    written_at: float


class ChunkImportTx(Protocol):
    """A memory store's side of one import batch, in its transaction: its retention
    ``cutoff``, what it ``held`` under the ids (locked), and ``write``: ``plan.new``
    inserted, ``plan.over`` written over, each with ``plan.revisions[i]`` (raising
    ImportConflict if another writer created a new id since ``held``)."""

    def cutoff(self) -> float | None: ...
    def held(self, ids: Sequence[str]) -> Mapping[str, HeldChunk]: ...
    def write(self, batch: ImportedChunks, plan: ImportPlan) -> None: ...


def import_chunk_batch(
    tx: ChunkImportTx,
    batch: ImportedChunks,
    on_conflict: OnConflict,
    *,
    allow_scope_change: bool = False,
) -> ImportOutcome:
    """One memory import batch inside the store's transaction ``tx``: what it holds
    compared with the batch, :func:`plan_import` deciding, ``tx`` writing. Raises
    ImportConflict, ImportScopeChange (nothing written)."""
    items = batch.request.items
    ids = list(batch.request.ids)
    at = tx.cutoff()
    expired = {i for i, w in enumerate(batch.written_at) if is_expired(w, at)}
    found = tx.held(ids)
    held: dict[str, Held] = {}
    for i, cid in enumerate(ids):
        h = found.get(cid)
        if h is not None:
            held[cid] = Held(
                same=h.revision >= batch.revisions[i] and same_record(h.record, items[i].record),
                revision=h.revision,
                rescoped=h.record.get("scope") != dict(items[i].scope),
                expired=is_expired(h.written_at, at),
            )
    plan = plan_import(
        ids,
        batch.revisions,
        held,
        on_conflict,
        expired=expired,
        allow_scope_change=allow_scope_change,
    )
    if plan.new or plan.over:
        tx.write(batch, plan)
    return plan.outcome


class KeyImportTx(Protocol):
    """An affect store's side of one import batch, in its transaction: the history it
    ``held`` under each key of the batch (locked), and ``write``: the keys of
    ``plan.over`` erased, then the histories of ``plan.new`` and ``plan.over`` written,
    the newest revision numbered ``plan.revisions[i]`` (raising ImportConflict if
    another writer created a new key since ``held``)."""

    def held(self, keys: Sequence[str]) -> Mapping[str, History]: ...
    def write(self, batch: ImportedKeys, plan: ImportPlan) -> None: ...


def import_key_batch(
    tx: KeyImportTx,
    batch: ImportedKeys,
    on_conflict: OnConflict,
    *,
    allow_scope_change: bool = False,
) -> ImportOutcome:
    """One affect import batch inside the store's transaction ``tx`` (see
    :func:`import_chunk_batch`). Raises ImportConflict, ImportScopeChange (nothing
    written)."""
    keys = [k.key for k in batch.keys]
    found = tx.held(keys)
    held: dict[str, Held] = {}
    for imported in batch.keys:
        history = found.get(imported.key)
        if history:
            held[imported.key] = Held(
                same=same_history(
                    [(rev, record_text(rec), at) for rev, rec, at in history],
                    [
                        (r.revision, record_text(r.item.record), r.recorded_at)
                        for r in imported.history
                    ],
                ),
                revision=history[-1][0],
                rescoped=history[-1][1].get("scope") != dict(imported.current.item.scope),
            )
    plan = plan_import(
        keys,
        [k.current.revision for k in batch.keys],
        held,
        on_conflict,
        allow_scope_change=allow_scope_change,
    )
    if plan.new or plan.over:
        tx.write(batch, plan)
    return plan.outcome
