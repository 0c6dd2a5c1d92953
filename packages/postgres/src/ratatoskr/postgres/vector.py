"""Sending pgvector values in binary, without the pgvector Python package.

A store only ever *sends* vectors (scores come back as plain floats), so one
small dumper is all it needs. It is registered with OID 0: the server then
infers the parameter's type from the ``%s::vector`` cast in the SQL, and reads
the bytes with that type's binary input. That keeps the adapter independent of
the per-database OID of an extension type, and of the schema the extension
lives in. Binary rather than text: formatting 384 floats as text per chunk
would cost more than the rest of an upsert.

pgvector's binary form (``vector_recv``): int16 dimension, int16 unused, then
the float32 components, all in network byte order.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt
from psycopg.adapt import AdaptersMap, Dumper
from psycopg.pq import Format

__all__ = ["Vector", "register_vector_dumper"]

_BIG_F32 = np.dtype(">f4")


class Vector:
    """A float32 vector ready to be sent as a pgvector ``vector`` parameter."""

    __slots__ = ("data",)

    def __init__(self, values: npt.NDArray[np.float32]) -> None:
        if values.ndim != 1:
            raise ValueError("a vector is one-dimensional")
        self.data = struct.pack(">HH", values.shape[0], 0) + values.astype(_BIG_F32).tobytes()


class _VectorBinaryDumper(Dumper):
    format = Format.BINARY
    oid = 0  # let the server take the type from the SQL cast (see the module docstring)

    def dump(self, obj: Any) -> bytes:
        data: bytes = obj.data
        return data


def register_vector_dumper(adapters: AdaptersMap) -> None:
    """Make ``adapters`` (a connection's or a shared context's) send :class:`Vector`."""
    adapters.register_dumper(Vector, _VectorBinaryDumper)
