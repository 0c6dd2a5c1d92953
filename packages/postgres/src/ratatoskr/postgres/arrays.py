"""A batch's array parameters in PostgreSQL's binary array form, built in one pass.

A write sends its batch as one array per column (``unnest(%b::text[], …)``: one
statement text for every batch size). psycopg dumps a ``list`` element by element
in Python (a dumper lookup, a call and a ``bytes`` per element); a batch of 100
chunks has ten such arrays, and that cost more client CPU than the rest of the
store's write path. :class:`BinaryArray` holds the array already in the form
``array_recv`` reads — ``ndim`` (1, or 0 when empty), a has-NULL flag, the element
type's OID, the length and lower bound (1), then each element as its length (-1:
NULL) and its bytes — and its dumper hands those bytes over as they are.

Its OID is 0, as for ``Vector`` (``vector.py``): the server takes the type from the
statement's cast (``%b::text[]``) and ``array_recv`` checks that the element OID in
the bytes is that type's, so a mismatch is an error, never a misread.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
from psycopg.adapt import AdaptersMap, Dumper
from psycopg.pq import Format

__all__ = [
    "BinaryArray",
    "bytea_array",
    "int8_array",
    "register_array_dumper",
    "text_array",
    "utf8_text_array",
]

_TEXT_OID = 25
_BYTEA_OID = 17
_INT8_OID = 20
_HEADER = struct.Struct(">iiIii")
_EMPTY = struct.Struct(">iiI")
_LENGTH = struct.Struct(">i")
_NULL = _LENGTH.pack(-1)
# An int8 element in binary: its length (always 8), then the value.
_INT8_ELEMENT = np.dtype([("length", ">i4"), ("value", ">i8")])


class BinaryArray:
    """A one-dimensional array parameter in binary form (see the module docstring)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def _array(oid: int, count: int, has_null: bool, elements: bytes) -> BinaryArray:
    if count == 0:
        return BinaryArray(_EMPTY.pack(0, 0, oid))
    return BinaryArray(_HEADER.pack(1, int(has_null), oid, count, 1) + elements)


def _varlena(oid: int, values: Sequence[bytes | None]) -> BinaryArray:
    pack = _LENGTH.pack
    parts: list[bytes] = []
    has_null = False
    for value in values:
        if value is None:
            has_null = True
            parts.append(_NULL)
        else:
            parts.append(pack(len(value)))
            parts.append(value)
    return _array(oid, len(values), has_null, b"".join(parts))


def text_array(values: Sequence[str | None]) -> BinaryArray:
    """``text[]`` of ``values`` (None: NULL)."""
    return _varlena(_TEXT_OID, [None if v is None else v.encode("utf-8") for v in values])


def utf8_text_array(values: Sequence[bytes]) -> BinaryArray:
    """``text[]`` of strings already encoded as UTF-8 (a canonical JSON body, say)."""
    return _varlena(_TEXT_OID, values)


def bytea_array(values: Sequence[bytes | None]) -> BinaryArray:
    """``bytea[]`` of ``values`` (None: NULL)."""
    return _varlena(_BYTEA_OID, values)


def int8_array(values: Sequence[int]) -> BinaryArray:
    """``int8[]`` of ``values`` (no NULLs)."""
    elements = np.empty(len(values), dtype=_INT8_ELEMENT)
    elements["length"] = 8
    elements["value"] = values
    return _array(_INT8_OID, len(values), False, elements.tobytes())


class _BinaryArrayDumper(Dumper):
    format = Format.BINARY
    oid = 0  # the type comes from the statement's cast (see the module docstring)

    def dump(self, obj: Any) -> bytes:
        data: bytes = obj.data
        return data


def register_array_dumper(adapters: AdaptersMap) -> None:
    """Make ``adapters`` (a connection's or a shared context's) send :class:`BinaryArray`."""
    adapters.register_dumper(BinaryArray, _BinaryArrayDumper)
