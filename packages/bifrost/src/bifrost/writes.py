"""The write path every store of every plane follows, once.

How a backend uses it (``upsert_many`` / ``put_many``)::

    request = validate_upsert(records, expected_revisions, key, cls, ...)  # or validate_put
    with <the store's transaction, or its lock>:
        # The clock is read inside: a TTL runs from when the write happened.
        write = begin_write(<the backend's ledger in it>, request, ctx.actor, clock())
        if write.replayed is not None:
            return write.replayed  # same actor, key and payload: the first result
        write.check(<stored scope of each of request.ids that exists>,
                    <current revision of each of request.ids>)  # grant, then revisions
        <the store's own SQL (or dicts) for the items of request, stamped write.now,
         each charged request.record_sizes() bytes to its tenant's usage>
        check_quota(<usage of batch_tenants(request) as the write left it>, quota)
        return write.record()  # prunes expired entries, records this one

A store gets ``upsert_many`` / ``put_many`` themselves (the protocol's signature
and the validation) from ``bifrost.memory.protocol.MemoryWrites`` /
``bifrost.affect.protocol.AffectWrites`` and implements only the part inside
the transaction, ``perform_upsert`` / ``perform_put(request, actor)``.

- Validation (``bifrost.memory.validation.validate_upsert``,
  ``bifrost.affect.validation.validate_put``) returns one :class:`WriteRequest`:
  the validated items (it is a sequence of them), their ids, the typed
  ``expected_revisions``, the digest, the idempotency class and TTL, the verb,
  and the ledger id of an actor (:meth:`WriteRequest.ledger_id`). Nothing else
  of the arguments needs to reach the store's transaction.
- :func:`replay_or_conflict` is the one decision on an earlier entry (a replay,
  or :class:`~bifrost.errors.IdempotencyConflict` with :data:`CONFLICT_MESSAGE`);
  :func:`check_existing_grant` the one grant decision on the records a write
  replaces (their stored scopes read in the write's transaction, so two writers
  under different grants never both succeed on one id; :func:`under_grant` checks
  the batch's own scopes before it); :func:`check_revisions` the one
  optimistic-locking check (:class:`~bifrost.errors.RevisionMismatch` for the
  first failing id, in the order ``expected_revisions`` gave them), before it
  (:func:`check_replaced` runs both, in that order, a record outside the grant
  counted as absent by the first: an expected revision cannot probe another
  tenant's ids); :func:`check_quota`
  (:mod:`bifrost.quota`) the one per-tenant quota decision, on the usage the
  write's own rows left, last before the ledger records the write.
- A delete (``delete_many``) is a write too: the store reads the stored scopes of
  its ids in the delete's transaction (rows locked) and erases what
  :func:`deletable` keeps, the ids inside the caller's grant.
- The backend package provides the ledger (a :class:`Ledger`: ``lookup``,
  ``record``, ``prune``) inside the write's transaction — ``ratatoskr.sqlite``'s
  ``IdempotencyLedger.within(conn)``, the reference stores' dict ledger under
  their lock. :func:`begin_write` (:func:`replay_write`) and
  :meth:`OpenWrite.record` (:func:`record_write`) drive it, so every
  store prunes expired entries (bounded) in each write that records one. A
  backend whose ledger works otherwise (PostgreSQL *claims* the id first) calls
  :func:`replay_or_conflict`, :meth:`WriteRequest.ledger_id`,
  :meth:`WriteRequest.expires_at` and :meth:`WriteRequest.result` itself.

The clock is read inside the transaction (or lock), once: the ledger lookup,
the expiry recorded, a store's own time stamps and pruning all see the same
``now``, and a write that waited for the lock is not stamped with the time it
began to wait.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, overload

from bifrost.errors import Forbidden, IdempotencyConflict, RevisionMismatch
from bifrost.idempotency import (
    idempotency_id,
    request_digest,
    ttl_seconds,
    validate_idempotency_key,
)
from bifrost.jsoncodec import canonical_json
from bifrost.quota import batch_tenants, check_quota, record_size
from bifrost.records import validate_expected_revisions
from bifrost.scope import inside_grant

__all__ = [
    "CONFLICT_MESSAGE",
    "Ledger",
    "OpenWrite",
    "RecordedWrite",
    "WriteRequest",
    "batch_tenants",
    "begin_write",
    "build_write_request",
    "check_existing_grant",
    "check_quota",
    "check_replaced",
    "check_revisions",
    "deletable",
    "digest_of_canonical",
    "outside_grant",
    "record_write",
    "replay_or_conflict",
    "replay_write",
    "under_grant",
    "validate_idempotency",
]

CONFLICT_MESSAGE = "idempotency_key was already used with a different request"

ItemT = TypeVar("ItemT")


@dataclass(frozen=True, eq=False)
class WriteRequest(Sequence[ItemT], Generic[ItemT]):
    """A validated write: everything a store needs, and a sequence of its items.

    ``items`` are the validated records in batch order and ``ids`` their ids (a
    chunk id, an affect key); ``expected`` is ``expected_revisions`` typed (ids of
    this batch → revision ≥ 0, in the order given); ``digest`` is the request
    digest of INV-002; ``result_field`` names the count in the result
    (``upserted``, ``written``). ``grant`` is the caller's scope grant (``{}``:
    unrestricted), set by :func:`under_grant`: a record the write would replace
    must lie inside it, decided inside the write's transaction
    (:func:`check_existing_grant`). ``sizes`` are the items' canonical JSON lengths
    when validation had them (see :meth:`record_sizes`).
    """

    verb: str
    items: tuple[ItemT, ...]
    ids: tuple[str, ...]
    expected: dict[str, int]
    digest: str
    idempotency_key: str
    idempotency_class: str | None
    result_field: str
    grant: Mapping[str, str] = field(default_factory=dict)
    sizes: tuple[int, ...] | None = None

    def record_sizes(self) -> tuple[int, ...]:
        """The bytes each item counts for in its tenant's quota
        (:func:`bifrost.quota.record_size`), in batch order."""
        if self.sizes is None:
            return tuple(record_size(item.record) for item in self.items)  # type: ignore[attr-defined]
        return self.sizes

    @property
    def ttl(self) -> int:
        """Seconds a ledger entry of this write lives (from its idempotency class)."""
        return ttl_seconds(self.idempotency_class)

    def ledger_id(self, actor: str) -> str:
        """The idempotency id of this write for ``actor`` (INV-002)."""
        return idempotency_id(self.verb, actor, self.idempotency_key)

    def expires_at(self, now: float) -> float:
        """When a ledger entry recorded at ``now`` expires."""
        return now + self.ttl

    def result(self) -> dict[str, Any]:
        """The result of performing this write: ``{result_field: N, "replayed": False}``."""
        return {self.result_field: len(self.items), "replayed": False}

    @overload
    def __getitem__(self, index: int) -> ItemT: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[ItemT]: ...

    def __getitem__(self, index: int | slice) -> ItemT | Sequence[ItemT]:
        return self.items[index]

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[ItemT]:
        return iter(self.items)


def validate_idempotency(
    idempotency_key: object, idempotency_class: object
) -> tuple[str, str | None]:
    """The idempotency key (a non-empty string of at most 256 characters) and class
    (null, ``default``, ``ephemeral`` or ``durable``) of a write, typed: the first
    check of every write. Raises InvalidArguments."""
    key = validate_idempotency_key(idempotency_key)
    ttl_seconds(idempotency_class)
    return key, idempotency_class if isinstance(idempotency_class, str) else None


def digest_of_canonical(records_json: Sequence[bytes], expected_revisions: dict[str, int]) -> str:
    """:func:`bifrost.idempotency.request_digest` of a batch given as each record's
    canonical JSON written by orjson alone (:func:`bifrost.records.canonical_record`;
    those compose into the batch's canonical JSON byte for byte) and its validated
    ``expected_revisions``: the same digest, without serialising the records again."""
    digest = hashlib.sha256(b'{"expected_revisions":')
    digest.update(canonical_json(expected_revisions))
    digest.update(b',"records":[')
    digest.update(b",".join(records_json))
    digest.update(b"]}")
    return digest.hexdigest()


def build_write_request(
    verb: str,
    result_field: str,
    items: Sequence[ItemT],
    ids: Sequence[str],
    *,
    records: object,
    expected_revisions: object,
    idempotency_key: str,
    idempotency_class: str | None,
    records_json: Sequence[bytes] | None = None,
) -> WriteRequest[ItemT]:
    """The request of a batch whose items and ids are validated: checks
    ``expected_revisions`` against ``ids`` and computes the digest over the
    ``records`` and ``expected_revisions`` as they were sent — from
    ``records_json`` when validation has every record's canonical JSON as orjson
    alone wrote it (:func:`bifrost.records.canonical_record`), which is the same
    digest without serialising the batch again.

    Raises InvalidArguments (``expected_revisions`` not null or an object of ids of
    this batch → integers ≥ 0).
    """
    expected = validate_expected_revisions(expected_revisions, set(ids))
    return WriteRequest(
        verb=verb,
        items=tuple(items),
        ids=tuple(ids),
        expected=expected,
        digest=request_digest(records, expected_revisions)
        if records_json is None
        else digest_of_canonical(records_json, expected),
        idempotency_key=idempotency_key,
        idempotency_class=idempotency_class,
        result_field=result_field,
        sizes=None if records_json is None else tuple(map(len, records_json)),
    )


class RecordedWrite(Protocol):
    """What a ledger keeps of a first call: its digest and its result."""

    @property
    def digest(self) -> str: ...

    @property
    def result(self) -> Any: ...


class Ledger(Protocol):
    """An idempotency ledger joined to one write's transaction (or the store's lock).

    ``lookup`` gives the live entry of an id (an expired one counts as absent);
    ``record`` stores a first call's outcome, replacing an expired entry of the
    same id; ``prune`` drops a bounded number of expired entries and says how many.
    """

    def lookup(self, idempotency_id: str, *, now: float) -> RecordedWrite | None: ...

    def record(
        self, idempotency_id: str, *, digest: str, result: Any, expires_at: float
    ) -> None: ...

    def prune(self, *, now: float) -> int: ...


def replay_or_conflict(
    entry: RecordedWrite | None, request: WriteRequest[Any]
) -> dict[str, Any] | None:
    """None when there is no live entry (perform the write); the entry's result marked
    ``replayed`` when its digest is the request's.

    Raises IdempotencyConflict (:data:`CONFLICT_MESSAGE`) when the same actor used the
    key for a different request.
    """
    if entry is None:
        return None
    if entry.digest != request.digest:
        raise IdempotencyConflict(CONFLICT_MESSAGE)
    return {**entry.result, "replayed": True}


def check_revisions(expected: Mapping[str, int], current: Mapping[str, int]) -> None:
    """Optimistic locking: every id of ``expected`` is at its expected revision in
    ``current`` (an id absent from ``current`` is at revision 0).

    Raises RevisionMismatch for the first id, in ``expected``'s order, that is not.
    """
    for rid, wanted in expected.items():
        actual = current.get(rid, 0)
        if actual != wanted:
            raise RevisionMismatch(rid, wanted, actual)


class Scoped(Protocol):
    """A validated item: it knows its scope."""

    @property
    def scope(self) -> Mapping[str, str]: ...


ScopedT = TypeVar("ScopedT", bound=Scoped)


def under_grant(request: WriteRequest[ScopedT], grant: Mapping[str, str]) -> WriteRequest[ScopedT]:
    """``request`` under ``grant`` (the token's scope grant; ``{}`` = unrestricted):
    every item's own scope must lie inside it. Called after the whole batch is
    validated (so a malformed batch is refused the same way whatever is stored) and
    before the transaction (it depends on no stored state); the records the write
    would replace are checked inside it (:func:`check_existing_grant`).

    Raises Forbidden for the first item outside the grant (by its batch index).
    """
    if not grant:
        return request
    for i, item in enumerate(request.items):
        if not inside_grant(item.scope, grant):
            raise Forbidden(f"record {i} lies outside the token's scope grant")
    return dataclasses.replace(request, grant=dict(grant))


def outside_grant(
    request: WriteRequest[Any], scopes: Mapping[str, Mapping[str, str]]
) -> frozenset[str]:
    """The ids of ``request`` whose stored scope (``scopes``, read in the write's
    transaction) lies outside its grant: records of another tenant, which the caller
    must not be able to tell from absent ones."""
    grant = request.grant
    if not grant:
        return frozenset()
    return frozenset(
        rid for rid in request.ids if rid in scopes and not inside_grant(scopes[rid], grant)
    )


def check_existing_grant(
    request: WriteRequest[Any], scopes: Mapping[str, Mapping[str, str]]
) -> None:
    """The one decision on the records a write would replace, inside its transaction:
    ``scopes`` holds the stored scope of (at least) every id of ``request`` that
    exists and lies outside the grant, read in the transaction that then writes —
    so two writers under different grants never both succeed on one id.

    Raises Forbidden for the first such id in batch order (by its index: never the
    id or a scope value).
    """
    foreign = outside_grant(request, scopes)
    for i, rid in enumerate(request.ids):
        if rid in foreign:
            raise Forbidden(f"existing record {i} lies outside the token's scope grant")


def check_replaced(
    request: WriteRequest[Any],
    scopes: Mapping[str, Mapping[str, str]],
    revisions: Mapping[str, int],
) -> None:
    """The checks on what a write replaces, inside its transaction, in their order:
    optimistic locking (:func:`check_revisions` on the current ``revisions``), with a
    record outside the grant counted as absent (revision 0), then the grant
    (:func:`check_existing_grant` on the stored ``scopes``). So an
    ``expected_revisions`` entry ≠ 0 for an id another tenant holds gets exactly the
    RevisionMismatch an absent id gets (actual 0), and only a write that would
    otherwise go ahead is Forbidden: neither answer tells whether the id exists
    elsewhere.

    Raises RevisionMismatch, Forbidden.
    """
    foreign = outside_grant(request, scopes)
    if foreign:
        revisions = {rid: rev for rid, rev in revisions.items() if rid not in foreign}
    check_revisions(request.expected, revisions)
    check_existing_grant(request, scopes)


def deletable(
    ids: Sequence[str], scopes: Mapping[str, Mapping[str, str]], grant: Mapping[str, str]
) -> list[str]:
    """The one grant decision of a delete, inside its transaction: of ``ids``, those a
    delete under ``grant`` (``{}``: unrestricted) erases, in the order of ``ids`` —
    the ids that exist (``scopes`` holds the stored scope of every id of ``ids`` that
    exists, read in the transaction that then deletes, its rows locked) and lie inside
    the grant. An id outside the grant is left as it is and counted as absent, so a
    concurrent writer moving or creating a record under another grant can never lose
    it to this delete.
    """
    return [rid for rid in ids if rid in scopes and inside_grant(scopes[rid], grant)]


def replay_write(
    ledger: Ledger, request: WriteRequest[Any], actor: str, now: float
) -> dict[str, Any] | None:
    """:func:`replay_or_conflict` on ``ledger``'s live entry for ``actor``'s request.

    Raises IdempotencyConflict.
    """
    return replay_or_conflict(ledger.lookup(request.ledger_id(actor), now=now), request)


def record_write(
    ledger: Ledger, request: WriteRequest[Any], actor: str, now: float
) -> dict[str, Any]:
    """Prune expired entries (bounded), record the request's result for ``actor`` with
    its expiry, and return the result (a fresh dict)."""
    ledger.prune(now=now)
    result = request.result()
    ledger.record(
        request.ledger_id(actor),
        digest=request.digest,
        result=result,
        expires_at=request.expires_at(now),
    )
    return dict(result)


@dataclass(frozen=True)
class OpenWrite:
    """A write inside its transaction, past the ledger lookup (see :func:`begin_write`).

    ``replayed`` is the first call's result when this one is a replay (the store
    returns it and writes nothing); else the store checks revisions, writes, and
    returns :meth:`record`. ``now`` is the write's time (its stamps, its expiry).
    """

    ledger: Ledger
    request: WriteRequest[Any]
    actor: str
    now: float
    replayed: dict[str, Any] | None

    def check(self, scopes: Mapping[str, Mapping[str, str]], revisions: Mapping[str, int]) -> None:
        """The checks on what the write replaces (:func:`check_replaced`): optimistic
        locking on the current ``revisions`` (a record outside the grant counted as
        absent), then the grant on the stored ``scopes``.

        Raises RevisionMismatch, Forbidden.
        """
        check_replaced(self.request, scopes, revisions)

    def record(self) -> dict[str, Any]:
        """:func:`record_write` of this write: prune, record, return the result."""
        return record_write(self.ledger, self.request, self.actor, self.now)


def begin_write(ledger: Ledger, request: WriteRequest[Any], actor: str, now: float) -> OpenWrite:
    """The first step inside a write's transaction: :func:`replay_write` at ``now``.

    Raises IdempotencyConflict.
    """
    return OpenWrite(ledger, request, actor, now, replay_write(ledger, request, actor, now))
