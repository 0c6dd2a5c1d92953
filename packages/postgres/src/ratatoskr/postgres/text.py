"""How an id, a key or a scope value is held in a PostgreSQL ``text`` column.

The wire lets these strings hold any character but a lone surrogate, NUL
included, and PostgreSQL text cannot hold NUL. So NUL and the escape character
U+0001 are escaped, and everything else is stored as it is:

    U+0000 → U+0001 U+0001        U+0001 → U+0001 U+0002

Every U+0001 in the stored form starts a pair, so the mapping is injective, and
it keeps order: under ``COLLATE "C"`` (byte order of UTF-8, which is code-point
order) stored strings sort exactly as Python sorts the originals. Keyset pages
of the affect plane depend on that. Ids without either character — all real
ones — are stored unchanged, so the tables stay readable with ``psql``.
"""

from __future__ import annotations

__all__ = ["from_db", "to_db", "utf8_encodable"]

_NUL = "\x00"
_ESC = "\x01"


def to_db(value: str) -> str:
    """The stored form of ``value`` (identity unless it holds U+0000 or U+0001)."""
    if _NUL not in value and _ESC not in value:
        return value
    return value.replace(_ESC, "\x01\x02").replace(_NUL, "\x01\x01")


def from_db(value: str) -> str:
    """Inverse of :func:`to_db`."""
    if _ESC not in value:
        return value
    # Pairs never overlap (every U+0001 starts one), and after the first replace the
    # only U+0001 left start "\x01\x02" pairs.
    return value.replace("\x01\x01", _NUL).replace("\x01\x02", _ESC)


def utf8_encodable(value: str) -> bool:
    """False for a string holding a lone surrogate: no stored value can equal it
    (validation refuses them in records), and the driver could not send it."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
