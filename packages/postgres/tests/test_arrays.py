"""Binary array parameters (ratatoskr.postgres.arrays, and vector.py's ``vector[]``)
read back by the server as sent."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest
from psycopg import sql

from ratatoskr.postgres import Pool
from ratatoskr.postgres.arrays import bytea_array, int8_array, text_array, utf8_text_array
from ratatoskr.postgres.extension import ensure_vector_extension, vector_type_oid
from ratatoskr.postgres.vector import VectorArray


def _echo(pool: Pool, statement: bytes, param: object) -> object:
    with pool.connection() as conn:
        row = conn.execute(statement, (param,)).fetchone()
    assert row is not None
    return row[0]


@pytest.mark.parametrize(
    "values",
    [[], ["a"], ["chunk-1", None, "", "é ✓ 𝄞", "x" * 5000], [None, None]],
)
def test_text_arrays_arrive_as_sent(pg_pool: Pool, values: list[str | None]) -> None:
    assert _echo(pg_pool, b"SELECT %b::text[]", text_array(values)) == values
    encoded = [v.encode("utf-8") for v in values if v is not None]
    assert _echo(pg_pool, b"SELECT %b::text[]", utf8_text_array(encoded)) == [
        v for v in values if v is not None
    ]


def test_bytea_and_int8_arrays_arrive_as_sent(pg_pool: Pool) -> None:
    blobs = [b"\x00\x01\xff" * 100, None, b""]
    assert _echo(pg_pool, b"SELECT %b::bytea[]", bytea_array(blobs)) == blobs
    numbers = [0, -1, 2**62, -(2**63), 2**63 - 1]
    assert _echo(pg_pool, b"SELECT %b::int8[]", int8_array(numbers)) == numbers
    assert _echo(pg_pool, b"SELECT %b::int8[]", int8_array([])) == []


def test_an_array_read_as_another_type_is_refused(pg_pool: Pool) -> None:
    # The element type travels with the bytes: array_recv refuses a mismatch rather
    # than reading text as integers.
    with pytest.raises(psycopg.errors.DatatypeMismatch):
        _echo(pg_pool, b"SELECT %b::int8[]", text_array(["12345678"]))


def test_vector_arrays_arrive_as_sent(pg_pool: Pool) -> None:
    """A batch's vectors as one binary ``vector[]`` (``VectorArray``, naming the
    database's own OID of the type as its element type): every row, in order, as the
    server prints it; an empty batch too."""
    with pg_pool.connection() as conn, conn.cursor() as cur:
        ext = ensure_vector_extension(cur)
        oid = vector_type_oid(cur, ext)
    vector = sql.SQL("{}.vector").format(sql.Identifier(ext))
    statement = sql.SQL("SELECT array_to_string(%b::{}[], ';')").format(vector)
    rows = np.array([[0.5, -2.0, 1.25], [0.0, -0.0, 3.0], [1e-3, 4.0, -7.5]], dtype=np.float32)
    with pg_pool.connection() as conn:
        got = conn.execute(statement, (VectorArray(rows, oid),)).fetchone()
        empty = conn.execute(statement, (VectorArray(rows[:0], oid),)).fetchone()
    assert got == ("[0.5,-2,1.25];[0,-0,3];[0.001,4,-7.5]",)
    assert empty == ("",)
