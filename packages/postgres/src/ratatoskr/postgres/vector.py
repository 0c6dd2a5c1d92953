"""Sending pgvector values in binary, without the pgvector Python package.

A store only ever *sends* vectors (scores come back as plain floats), so two
small dumpers are all it needs. :class:`Vector` (one query vector) is
registered with OID 0: the server then
infers the parameter's type from the ``%s::vector`` cast in the SQL, and reads
the bytes with that type's binary input. That keeps the adapter independent of
the per-database OID of an extension type, and of the schema the extension
lives in. Binary rather than text: formatting 384 floats as text per chunk
would cost more than the rest of an upsert.

pgvector's binary form (``vector_recv``): int16 dimension, int16 unused, then
the float32 components, all in network byte order.

:class:`VectorArray` (a batch of vectors to write) is sent as one binary
``vector[]``: each element in ``vector_recv``'s form, the whole built by numpy in one
pass. One array parameter keeps a batch's statement text the same whatever its size:
psycopg converts and the server prepares it once, where a ``VALUES`` list of ``n``
rows was a new statement per batch size, parsed by psycopg on every call
(docs/decisions.md). The bytes name the element type's OID, which ``array_recv``
may check (PostgreSQL 18 does not), and an extension type's OID is the database's
own, so the writer looks it up once
(:func:`ratatoskr.postgres.extension.vector_type_oid`). It replaced a flat ``float4[]``
sliced per row and cast to ``vector``: the server received that one float at a time
(a length and a call per element) and built a slice per row — 1.20 against 0.26 ms
of server CPU for 100 rows of 384 (docs/postgres.md).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt
from psycopg.adapt import AdaptersMap, Dumper
from psycopg.pq import Format

__all__ = ["Vector", "VectorArray", "register_vector_dumper"]

_BIG_F32 = np.dtype(">f4")


class Vector:
    """A float32 vector ready to be sent as a pgvector ``vector`` parameter."""

    __slots__ = ("data",)

    def __init__(self, values: npt.NDArray[np.float32]) -> None:
        if values.ndim != 1:
            raise ValueError("a vector is one-dimensional")
        self.data = struct.pack(">HH", values.shape[0], 0) + values.astype(_BIG_F32).tobytes()


class VectorArray:
    """Float32 rows (``n × dim``) ready to be sent as one binary ``vector[]`` parameter
    (``oid``: the ``vector`` type's OID in the database written to)."""

    __slots__ = ("data",)

    def __init__(self, rows: npt.NDArray[np.float32], oid: int) -> None:
        if rows.ndim != 2:
            raise ValueError("vector rows are two-dimensional")
        count, dim = rows.shape
        element = np.dtype(
            [("length", ">i4"), ("dim", ">u2"), ("unused", ">u2"), ("values", _BIG_F32, (dim,))]
        )
        elements = np.empty(count, dtype=element)
        elements["length"] = 4 + 4 * dim
        elements["dim"] = dim
        elements["unused"] = 0
        elements["values"] = rows
        # ndim 1 (0 when empty), no NULLs, the element type; the one dimension's length
        # and lower bound 1.
        if count == 0:
            self.data = struct.pack(">iiI", 0, 0, oid)
        else:
            self.data = struct.pack(">iiIii", 1, 0, oid, count, 1) + elements.tobytes()


class _VectorArrayBinaryDumper(Dumper):
    format = Format.BINARY
    oid = 0  # the type comes from the statement's cast (``%b::vector[]``)

    def dump(self, obj: Any) -> bytes:
        data: bytes = obj.data
        return data


class _VectorBinaryDumper(Dumper):
    format = Format.BINARY
    oid = 0  # let the server take the type from the SQL cast (see the module docstring)

    def dump(self, obj: Any) -> bytes:
        data: bytes = obj.data
        return data


def register_vector_dumper(adapters: AdaptersMap) -> None:
    """Make ``adapters`` (a connection's or a shared context's) send :class:`Vector`
    and :class:`VectorArray`."""
    adapters.register_dumper(Vector, _VectorBinaryDumper)
    adapters.register_dumper(VectorArray, _VectorArrayBinaryDumper)
