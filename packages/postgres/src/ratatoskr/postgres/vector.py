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

:class:`VectorRows` (a batch of vectors to write) is sent as one flat
``float4[]`` — a built-in type, so its OID is fixed — that the statement slices
per row and casts to ``vector`` (``(rows)[(i - 1) * dim + 1 : i * dim]``). One
array parameter keeps a batch's statement text the same whatever its size:
psycopg converts and the server prepares it once, where a ``VALUES`` list of
``n`` rows was a new statement per batch size, parsed by psycopg on every call
(docs/decisions.md).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt
from psycopg.adapt import AdaptersMap, Dumper
from psycopg.pq import Format

__all__ = ["Vector", "VectorRows", "register_vector_dumper"]

_BIG_F32 = np.dtype(">f4")
_FLOAT4_OID = 700
_FLOAT4_ARRAY_OID = 1021
# An array element in binary: its length (always 4), then the float4.
_ELEMENT = np.dtype([("length", ">i4"), ("value", ">f4")])


class Vector:
    """A float32 vector ready to be sent as a pgvector ``vector`` parameter."""

    __slots__ = ("data",)

    def __init__(self, values: npt.NDArray[np.float32]) -> None:
        if values.ndim != 1:
            raise ValueError("a vector is one-dimensional")
        self.data = struct.pack(">HH", values.shape[0], 0) + values.astype(_BIG_F32).tobytes()


class VectorRows:
    """Float32 rows (``n × dim``) ready to be sent as one flat ``float4[]`` parameter."""

    __slots__ = ("data",)

    def __init__(self, rows: npt.NDArray[np.float32]) -> None:
        if rows.ndim != 2:
            raise ValueError("vector rows are two-dimensional")
        elements = np.empty(rows.size, dtype=_ELEMENT)
        elements["length"] = 4
        elements["value"] = rows.reshape(-1)
        # ndim 1, no NULLs, element type float4; then the one dimension: length, lower bound 1.
        header = struct.pack(">iiIii", 1, 0, _FLOAT4_OID, rows.size, 1)
        self.data = header + elements.tobytes()


class _VectorRowsBinaryDumper(Dumper):
    format = Format.BINARY
    oid = _FLOAT4_ARRAY_OID

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
    and :class:`VectorRows`."""
    adapters.register_dumper(Vector, _VectorBinaryDumper)
    adapters.register_dumper(VectorRows, _VectorRowsBinaryDumper)
