"""ratatoskr.sqlite.keys: keyset pages in code-point order, and IN lists past one batch."""

from __future__ import annotations

import apsw

from ratatoskr.sqlite.keys import IN_LIST, keyset_page, rows_in


def _table(keys: list[str]) -> apsw.Connection:
    conn = apsw.Connection(":memory:")
    conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(k, i) for i, k in enumerate(keys)])
    return conn


def test_keyset_pages_read_every_row_once_in_code_point_order() -> None:
    # "é" (U+00E9) and "😀" (U+1F600) sort after "z" by code point; "Z" before "a".
    keys = ["b", "a", "Z", "é", "😀", "z", "aa"]
    conn = _table(keys)
    seen: list[str] = []
    after: str | None = None
    pages = 0
    while True:
        rows, after = keyset_page(conn, "t", "k", "v", after, 3)
        pages += 1
        seen += [str(r[0]) for r in rows]
        assert all(len(r) == 2 for r in rows)
        if after is None:
            break
    assert seen == sorted(keys) == ["Z", "a", "aa", "b", "z", "é", "😀"]
    # 7 rows by 3: two full pages and a short one ends it.
    assert pages == 3


def test_a_full_last_page_ends_with_an_empty_one() -> None:
    conn = _table(["a", "b"])
    rows, after = keyset_page(conn, "t", "k", "v", None, 2)
    assert [r[0] for r in rows] == ["a", "b"] and after == "b"
    assert keyset_page(conn, "t", "k", "v", after, 2) == ([], None)


def test_rows_in_reads_every_key_across_in_lists() -> None:
    keys = [f"k{i:05d}" for i in range(IN_LIST * 2 + 7)]
    conn = _table(keys)
    wanted = [*keys[::2], "absent"]
    got = sorted(str(r[0]) for r in rows_in(conn, "SELECT k FROM t WHERE k IN ({keys})", wanted))
    assert got == sorted(keys[::2])
    assert list(rows_in(conn, "SELECT k FROM t WHERE k IN ({keys})", [])) == []
