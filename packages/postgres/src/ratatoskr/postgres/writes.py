"""bifrost's one write path, in one PostgreSQL transaction: what every PostgreSQL store's
write verb runs around its own SQL.

:func:`run_write` opens a READ COMMITTED transaction, reads the store's clock
inside it, and follows ``bifrost.writes``: ``replay_write`` on the plane's
ledger (which *claims* the id when it finds no entry, see ``ledger.py``) → the
store's own statements (``perform``) → ``check_revisions`` → ``record_write``
(bounded pruning, the entry, the result). Any error rolls all of it back, the
claim included.

The revision check comes *after* the store's statements, on the revisions they
report having replaced: every store writes with ``INSERT … ON CONFLICT DO UPDATE
SET revision = revision + 1 … RETURNING revision`` in id order, which locks each
row and reads its latest committed revision in one step. A row another
transaction created or changed after this one began is seen there, so of eight
writers creating one id with expected revision 0 exactly one succeeds, without a
``SELECT … FOR UPDATE`` round trip first. On a mismatch the statements are
rolled back with the rest: nothing is written.

The grant is decided the same way, in the same statement: its ``DO UPDATE`` takes
``WHERE`` :func:`grant_predicate` (the conflicting row lies inside the caller's
grant), so a row of another tenant — committed before, or by a writer this one
waited for — is locked but neither changed nor returned. The store then reads
the scopes of the ids it did not get back (still locked) and bifrost's
``check_replaced`` refuses the write (``Forbidden``; or ``RevisionMismatch``, actual
0, when it expected another revision of such a row, as for an absent id; everything
rolled back).
Two writers under different grants creating one id: one inserts, the other
waits for it, finds the row outside its grant and is refused.

The per-tenant quota comes last, before the ledger's entry: the store's statements
fired the usage triggers (``ratatoskr.postgres.quota``), which locked the usage rows
of the batch's tenants; their usage as this write leaves them is read in the same
transaction and bifrost's ``check_quota`` decides (``QuotaExceeded``; everything
rolled back).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from psycopg import Cursor, sql

from bifrost.quota import NO_QUOTA, Quota
from bifrost.writes import (
    WriteRequest,
    batch_tenants,
    check_quota,
    check_replaced,
    record_write,
    replay_write,
)
from ratatoskr.postgres.database import PostgresDatabase
from ratatoskr.postgres.ledger import PostgresLedger
from ratatoskr.postgres.quota import TenantUsageTable
from ratatoskr.postgres.scope import AXIS_COLUMNS, scope_columns
from ratatoskr.storage.errors import StorageCorrupt

__all__ = [
    "Perform",
    "Replaced",
    "grant_params",
    "grant_predicate",
    "revisions_before",
    "run_write",
]


class Replaced(NamedTuple):
    """What a store's statements report: the revision each written id had before
    them (a new one: 0), and the stored scope of each id they did not write (a row
    outside the grant, see the module docstring)."""

    revisions: Mapping[str, int]
    refused: Mapping[str, Mapping[str, str]]


# The store's statements for a non-empty request, given the cursor and the
# transaction's ``now``.
Perform = Callable[[Cursor[Any], float], Replaced]


def grant_predicate(alias: str) -> sql.Composed:
    """``WHERE`` of an upsert's ``DO UPDATE``: the conflicting row (``alias``) carries
    every axis of the grant with an equal value (bifrost's ``inside_grant``). One
    parameter per lattice axis (:func:`grant_params`): NULL, an axis the grant does
    not name, holds for every row; so the text is the same for every grant."""
    return sql.SQL(" AND ").join(
        sql.SQL("{c} IS NOT DISTINCT FROM coalesce(%s::text, {c})").format(
            c=sql.Identifier(alias, column)
        )
        for column in AXIS_COLUMNS.values()
    )


def grant_params(grant: Mapping[str, str]) -> tuple[str | None, ...]:
    """The parameters of :func:`grant_predicate` for ``grant``."""
    return scope_columns(grant)


def run_write(
    db: PostgresDatabase,
    ledger: PostgresLedger,
    request: WriteRequest[Any],
    *,
    actor: str,
    clock: Callable[[], float],
    perform: Perform,
    quota: Quota = NO_QUOTA,
    usage: TenantUsageTable | None = None,
) -> dict[str, Any]:
    """Perform ``request`` for ``actor`` exactly once (see the module docstring); its
    result, or the first call's result marked ``replayed``.

    ``quota`` is decided on ``usage`` (the plane's usage table) when it limits anything.

    Raises IdempotencyConflict, Forbidden, RevisionMismatch, QuotaExceeded (nothing
    written on any), what ``perform`` raises, StorageError subclasses.
    """

    def transaction(cur: Cursor[Any]) -> dict[str, Any]:
        now = clock()
        entries = ledger.within(cur)
        replayed = replay_write(entries, request, actor, now)
        if replayed is not None:
            return replayed
        if request.items:
            replaced = perform(cur, now)
            check_replaced(request, replaced.refused, replaced.revisions)
            if len(replaced.revisions) != len(request.ids):
                # A row the grant predicate refused although bifrost's rule accepts it.
                raise StorageCorrupt("a write left records of its batch unwritten")
            if quota.enabled and usage is not None:
                check_quota(usage.read(cur, batch_tenants(request.items)), quota)
        return record_write(entries, request, actor, now)

    # The whole call within the database's sync_wait, whatever it waits for.
    return db.run(transaction, mode="write", bound="call")


def revisions_before(rows: list[tuple[Any, ...]], decode: Callable[[str], str]) -> dict[str, int]:
    """``{id: revision before the write}`` from ``RETURNING id, revision`` rows of an
    upsert that set ``revision = revision + 1`` (a new row has revision 1: before, 0)."""
    return {decode(str(rid)): int(rev) - 1 for rid, rev in rows}
