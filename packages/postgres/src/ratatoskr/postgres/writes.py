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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from psycopg import Cursor

from bifrost.writes import WriteRequest, check_revisions, record_write, replay_write
from ratatoskr.postgres.database import PostgresDatabase
from ratatoskr.postgres.ledger import PostgresLedger

__all__ = ["Perform", "revisions_before", "run_write"]

# The store's statements for a non-empty request, given the cursor and the
# transaction's ``now``: the revision each id had before them (absent = 0).
Perform = Callable[[Cursor[Any], float], Mapping[str, int]]


def run_write(
    db: PostgresDatabase,
    ledger: PostgresLedger,
    request: WriteRequest[Any],
    *,
    actor: str,
    clock: Callable[[], float],
    perform: Perform,
) -> dict[str, Any]:
    """Perform ``request`` for ``actor`` exactly once (see the module docstring); its
    result, or the first call's result marked ``replayed``.

    Raises IdempotencyConflict, RevisionMismatch (nothing written on either), what
    ``perform`` raises, StorageError subclasses.
    """

    def transaction(cur: Cursor[Any]) -> dict[str, Any]:
        now = clock()
        entries = ledger.within(cur)
        replayed = replay_write(entries, request, actor, now)
        if replayed is not None:
            return replayed
        if request.items:
            check_revisions(request.expected, perform(cur, now))
        return record_write(entries, request, actor, now)

    return db.run(transaction, mode="write")


def revisions_before(rows: list[tuple[Any, ...]], decode: Callable[[str], str]) -> dict[str, int]:
    """``{id: revision before the write}`` from ``RETURNING id, revision`` rows of an
    upsert that set ``revision = revision + 1`` (a new row has revision 1: before, 0)."""
    return {decode(str(rid)): int(rev) - 1 for rid, rev in rows}
