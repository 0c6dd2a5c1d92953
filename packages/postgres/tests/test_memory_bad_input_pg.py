"""The memory plane's bad-input matrix on PostgreSQL.

The cases and the test are the memory package's own
(``packages/memory/tests/test_bad_input.py``, which runs them on SQLite), run here
against a PostgreSQL ``store``; only "every row of every table" is read the
PostgreSQL way (:func:`backends_pg.dump` in place of the SQLite-only ``dump``).
Each case asserts its typed error and that the stored state is unchanged.

One store serves the module: each case first seeds the same state (a replayed
write and a no-op delete after the first) and compares everything before and
after its call, so a case that changed anything fails itself. Opening a schema
per case would cost more than the cases.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ratatoskr.postgres import Pool

from ...memory.tests import test_bad_input as memory_cases
from ...memory.tests.conftest import DIM, chunk
from ...memory.tests.test_bad_input import test_error_messages_hold_no_values
from .backends_pg import MemoryStore, Place, dump, scratch_schema

__all__ = ["test_error_messages_hold_no_values"]  # collected here too, on PostgreSQL


@pytest.fixture(scope="module")
def store(pg_dsn: str, pg_pool: Pool) -> Iterator[MemoryStore]:
    with scratch_schema(pg_dsn) as schema:
        s = Place("postgres", pg_dsn, schema).open_memory(embedding_dim=DIM, pool=pg_pool)
        yield s
        s.close()


@pytest.mark.parametrize("case", sorted(memory_cases.CASES))
def test_bad_input_is_refused_and_nothing_changes(
    store: MemoryStore, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory_cases, "dump", dump)
    memory_cases.test_bad_input_is_refused_and_nothing_changes(store, case)  # type: ignore[arg-type]


def test_the_dump_sees_every_table(pg_pool: Pool, pg_dsn: str) -> None:
    """The comparison is only as good as the dump: it holds the chunks, the ledger and
    the schema's version and settings tables, and a write shows in it."""
    with scratch_schema(pg_dsn) as schema:
        s = Place("postgres", pg_dsn, schema).open_memory(embedding_dim=DIM, pool=pg_pool)
        before = dump(s)
        assert {
            "memory_chunks",
            "memory_idempotency",
            "ratatoskr_schema",
            "ratatoskr_meta",
        } <= set(before)
        s.upsert_many([chunk("z", 3)], idempotency_key="z", ctx=memory_cases.CTX)
        after = dump(s)
        assert after["memory_chunks"] != before["memory_chunks"]
        assert after["memory_idempotency"] != before["memory_idempotency"]
        s.close()
