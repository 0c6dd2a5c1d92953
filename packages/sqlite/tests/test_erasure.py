"""make_room: the page cache an erasing transaction keeps for the pages it frees."""

from __future__ import annotations

from pathlib import Path

import apsw

from ratatoskr.sqlite import connect
from ratatoskr.sqlite.erasure import ROOM_MAX_KIB, make_room


def cache(conn: apsw.Connection) -> int:
    return int(conn.execute("PRAGMA cache_size").fetchall()[0][0])  # type: ignore[arg-type]


def test_room_grows_the_cache_to_the_pages_asked(tmp_path: Path) -> None:
    conn = connect(str(tmp_path / "a.db"))
    assert cache(conn) == -2000  # SQLite's default: 2,000 KiB
    make_room(conn, 3000)  # 3,000 pages of 4 KiB
    assert cache(conn) == -12000


def test_room_never_shrinks_the_cache(tmp_path: Path) -> None:
    conn = connect(str(tmp_path / "a.db"))
    make_room(conn, 10)
    assert cache(conn) == -2000
    conn.execute("PRAGMA cache_size=5000")  # pages: 20,000 KiB
    make_room(conn, 4000)
    assert cache(conn) == 5000


def test_room_is_bounded(tmp_path: Path) -> None:
    conn = connect(str(tmp_path / "a.db"))
    make_room(conn, 10**9)
    assert cache(conn) == -ROOM_MAX_KIB
