"""The affect plane's bad-input matrix on PostgreSQL.

The cases (``BAD_CALLS``, ``BAD_DISPATCHES``) and the test are the affect
package's own (``packages/affect/tests/test_bad_input.py``, which runs them on
SQLite), run here against a PostgreSQL store seeded as there; "every row of every
table" is read the PostgreSQL way (:func:`backends_pg.dump`). Each case asserts
its exact typed error, that no message echoes a value, and that nothing changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ratatoskr.postgres import Pool

from ...affect.tests import test_bad_input as affect_cases
from ...affect.tests.conftest import rec
from ...affect.tests.test_bad_input import BAD_CALLS, BAD_DISPATCHES, CTX, Call
from .backends_pg import AffectStore, Place, Rows, dump, scratch_schema

CASES = BAD_CALLS + BAD_DISPATCHES


class Dumping:
    """The store as the affect test reads it: its verbs, and ``dump()`` (which the
    SQLite store has and the PostgreSQL store leaves to :func:`backends_pg.dump`)."""

    def __init__(self, store: AffectStore) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def dump(self) -> dict[str, Rows]:
        return dump(self.store)


@pytest.fixture(scope="module")
def seeded(pg_dsn: str, pg_pool: Pool) -> Iterator[Dumping]:
    """As the affect test's ``seeded``: limits of 3 per batch and 5 per page, key
    ``a`` at revision 2 (its second write under key ``k-used``), ``b`` in tenant t2.
    One store for the module: every case compares all rows before and after itself."""
    with scratch_schema(pg_dsn) as schema:
        small = Place("postgres", pg_dsn, schema).open_affect(pool=pg_pool, max_batch=3, max_page=5)
        small.put_many(
            [rec("a"), rec("b", scope={"tenant": "t2"})], idempotency_key="k-seed", ctx=CTX
        )
        small.put_many([rec("a", mood=1)], idempotency_key="k-used", ctx=CTX)
        yield Dumping(small)
        small.close()


@pytest.mark.parametrize(("case", "call", "error"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_its_type_and_changes_nothing_on_postgres(
    seeded: Dumping, case: str, call: Call, error: type[Exception]
) -> None:
    affect_cases.test_bad_input_raises_its_type_and_changes_nothing(seeded, case, call, error)  # type: ignore[arg-type]


def test_the_dump_sees_every_table(seeded: Dumping, pg_dsn: str, pg_pool: Pool) -> None:
    """The comparison is only as good as the dump: it holds the current state, the
    history, the ledger and the schema's tables, and a write shows in it."""
    before = seeded.dump()
    tables = {"affect_current", "affect_history", "affect_idempotency", "ratatoskr_schema"}
    assert tables <= set(before)
    assert len(before["affect_current"]) == 2 and len(before["affect_history"]) == 3
    with scratch_schema(pg_dsn) as schema:
        other = Dumping(Place("postgres", pg_dsn, schema).open_affect(pool=pg_pool))
        empty = other.dump()
        other.put_many([rec("a")], idempotency_key="k", ctx=CTX)
        after = other.dump()
        assert all(after[t] != empty[t] for t in tables - {"ratatoskr_schema"})
        other.close()
