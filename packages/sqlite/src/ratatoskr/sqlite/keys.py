"""Reading rows by their key, as the planes do it: a keyset page in key order, and the
rows under a list of keys, in ``IN`` lists short enough for SQLite's bound-parameter
limit.

Keys are text compared in SQLite's BINARY collation, which for UTF-8 text is
code-point order: the order a client sorting ids as strings sees. Table, column and
statement text come from the caller's own constants, never from a request.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import apsw

__all__ = ["IN_LIST", "keyset_page", "rows_in"]

# Keys bound per IN list (SQLite's default limit is 32766 parameters; this keeps each
# statement small enough to plan and run quickly).
IN_LIST = 500

Row = tuple[Any, ...]


def keyset_page(
    conn: apsw.Connection, table: str, key: str, columns: str, after: str | None, limit: int
) -> tuple[list[Row], str | None]:
    """Up to ``limit`` rows ``(key, *columns)`` of ``table`` whose ``key`` sorts after
    ``after`` (None: from the first), in key order; and the cursor of the next page:
    the last key of a full page, None when this page is the last."""
    rows = conn.execute(
        f"SELECT {key}, {columns} FROM {table} WHERE {key} > ? ORDER BY {key} LIMIT ?",
        ("" if after is None else after, limit),
    ).fetchall()
    return rows, str(rows[-1][0]) if len(rows) == limit else None


def rows_in(conn: apsw.Connection, statement: str, keys: Sequence[Any]) -> Iterator[Row]:
    """The rows of ``statement`` — whose ``{keys}`` stands where the IN list's
    placeholders go — for every one of ``keys``, :data:`IN_LIST` keys at a time."""
    for start in range(0, len(keys), IN_LIST):
        part = tuple(keys[start : start + IN_LIST])
        yield from conn.execute(statement.format(keys=",".join("?" * len(part))), part)
