"""A file beside the database holding the index's codes, so a reopen maps them.

Rebuilding the index from SQLite reads and codes every row (seconds at 100k
chunks). The store instead keeps ``<db>-index`` beside the database: the int8
codes, scales, ids and scope classes of an index at a known change counter
``seq``. A reopen memory-maps the code arrays copy-on-write (no per-row work, and
every process that opens the same file shares those pages until it writes) and
then catches up from the change log like any index that is behind
(:mod:`ratatoskr.memory.sync`).

It is a cache, never the only copy of anything, and it is trusted only when it
provably describes this database:

- written whole to a fresh temporary file, fsynced, then renamed over the old
  one, so a reader sees the old file or the new one, never a torn one (a writer
  SIGKILLed mid-write leaves a temporary file that nobody reads and the next
  writer removes); the header and the metadata (ids, classes) carry a CRC and the
  file's exact length is checked;
- it names the database's **lineage** (the device and inode of its file, and its
  schema history with the time each migration was applied, i.e. when the file was
  created) and its ``seq``: a file from another database (or a copy of this one),
  a newer one, one whose ``seq`` is below the tombstone horizon, or one of another
  dimension is ignored, and the index is rebuilt from SQLite;
- after catching up, the index must hold as many chunks as the database, or it
  is rebuilt from SQLite.

Bit rot inside the code arrays is not detected (a CRC over them would cost a
reopen a third of its budget); deleting the file is always safe.
"""

from __future__ import annotations

import contextlib
import os
import stat
import struct
import time
import uuid
import zlib
from dataclasses import dataclass
from typing import Any

import apsw
import numpy as np
import numpy.typing as npt
import orjson

from ratatoskr.sqlite import codec

SUFFIX = "-index"
_MAGIC = b"RTSKIDX1"
_VERSION = 1
# magic, version, dim, seq, rows, err1_max, err2_max, meta length, meta CRC, header CRC
_HEADER = struct.Struct("<8sIIQQddQII")
_ALIGN = 64
_STALE_TEMP_S = 600.0


def path_for(conn: apsw.Connection) -> str | None:
    """The sidecar of ``conn``'s main database file (None in memory)."""
    name = conn.filename
    return f"{name}{SUFFIX}" if name else None


def lineage(conn: apsw.Connection) -> str:
    """What identifies the database: the device and inode of its file (a file copied
    or restored beside it is another file) and its memory-plane schema history with
    the time each step was applied (to the second)."""
    rows = conn.execute(
        "SELECT version, name, applied_at FROM ratatoskr_schema WHERE plane = 'memory'"
        " ORDER BY version"
    ).fetchall()
    ident: list[Any] = [[str(v) for v in row] for row in rows]
    name = conn.filename
    if name:
        st = os.stat(name)
        ident.append([st.st_dev, st.st_ino])
    return codec.dumps(ident)


@dataclass(frozen=True)
class Image:
    """A tight index: rows ``[0, n)`` laid out class after class."""

    dim: int
    seq: int
    codes: npt.NDArray[np.int8]
    resid: npt.NDArray[np.int8]
    scale: npt.NDArray[np.float64]
    scale2: npt.NDArray[np.float64]
    ids: list[str]
    classes: list[tuple[tuple[tuple[str, str], ...], int]]  # (scope items, row count)
    err1_max: float
    err2_max: float


def _pad(n: int) -> int:
    return (-n) % _ALIGN


def write(path: str, image: Image, *, lineage: str) -> None:
    """Write ``image`` to ``path`` atomically (temporary file, fsync, rename), mode 0600.

    Raises OSError (the caller may ignore it: the sidecar is a cache).
    """
    _remove_stale_temps(path)
    meta = orjson.dumps(
        {
            "lineage": lineage,
            "ids": image.ids,
            "classes": [[[list(item) for item in items], count] for items, count in image.classes],
        }
    )
    rows = len(image.ids)
    header = _header(image.dim, image.seq, rows, image.err1_max, image.err2_max, meta)
    tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(header)
            f.write(b"\0" * _pad(len(header)))
            f.write(meta)
            f.write(b"\0" * _pad(len(meta)))
            for arr in (image.codes, image.resid, image.scale, image.scale2):
                # The array's own buffer (a tight index's rows are contiguous): no copy.
                data = np.ascontiguousarray(arr[:rows]).reshape(-1).view(np.uint8)
                f.write(data.data)
                f.write(b"\0" * _pad(data.nbytes))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _header(dim: int, seq: int, rows: int, err1: float, err2: float, meta: bytes) -> bytes:
    fields = (_MAGIC, _VERSION, dim, seq, rows, err1, err2, len(meta), zlib.crc32(meta))
    body = _HEADER.pack(*fields, 0)
    return _HEADER.pack(*fields, zlib.crc32(body[:-4]))


def _remove_stale_temps(path: str) -> None:
    """Temporary files a killed writer left behind (older than any live write)."""
    folder = os.path.dirname(path) or "."
    prefix = os.path.basename(path) + ".tmp-"
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if entry.name.startswith(prefix):
                with contextlib.suppress(OSError):
                    if time.time() - entry.stat().st_mtime > _STALE_TEMP_S:
                        os.unlink(entry.path)


def _read_head(path: str, dim: int) -> tuple[tuple[Any, ...], bytes, int] | None:
    """The header's fields, the metadata bytes and the file's size when the header is
    whole, of this format and ``dim`` and its CRC holds; else None. Raises OSError."""
    # Only a regular file: opening a FIFO (or a device) put there would block.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as f:
        head = f.read(_HEADER.size)
        if len(head) != _HEADER.size:
            return None
        fields = _HEADER.unpack(head)
        magic, version, fdim, meta_len, head_crc = (*fields[:3], fields[7], fields[9])
        if magic != _MAGIC or version != _VERSION or fdim != dim:
            return None
        if zlib.crc32(head[:-4]) != head_crc:
            return None
        f.seek(_HEADER.size + _pad(_HEADER.size))
        meta_bytes = f.read(meta_len)
        return fields, meta_bytes, os.fstat(f.fileno()).st_size


def _map_arrays(path: str, offset: int, rows: int, dim: int) -> list[Any]:
    """The code arrays at ``offset``, mapped copy-on-write (writes stay private, pages
    nobody writes stay shared). A plain ndarray view of each map (it keeps the map
    alive): the memmap subclass adds microseconds to every slice and product of a
    search."""
    layout = [("i1", (rows, dim)), ("i1", (rows, dim)), ("<f8", (rows,)), ("<f8", (rows,))]
    arrays: list[Any] = []
    for dtype, shape in layout:
        if rows == 0:
            arrays.append(np.zeros(shape, dtype=dtype))
            continue
        mapped = np.memmap(path, dtype=dtype, mode="c", offset=offset, shape=shape)
        arrays.append(mapped.view(np.ndarray))
        offset += mapped.nbytes + _pad(mapped.nbytes)
    return arrays


def _valid_meta(meta: Any, rows: int, lineage: str) -> bool:
    """Whether the decoded metadata is of this ``lineage`` with ``rows`` string ids."""
    if not isinstance(meta, dict) or meta.get("lineage") != lineage:
        return False
    ids = meta.get("ids")
    return isinstance(ids, list) and len(ids) == rows and all(isinstance(i, str) for i in ids)


def read(path: str, dim: int, *, lineage: str) -> Image | None:
    """The image in ``path`` if it is whole, of ``dim`` and of this ``lineage``; else
    None (missing, torn, foreign or of another format). Never raises for a bad file."""
    try:
        found = _read_head(path, dim)
        if found is None:
            return None
        (_m, _v, _d, seq, rows, err1, err2, meta_len, meta_crc, _c), meta_bytes, size = found
        if len(meta_bytes) != meta_len or zlib.crc32(meta_bytes) != meta_crc:
            return None
        offset = _HEADER.size + _pad(_HEADER.size) + meta_len + _pad(meta_len)
        sizes = [rows * dim, rows * dim, rows * 8, rows * 8]
        if size != offset + sum(n + _pad(n) for n in sizes):
            return None
        meta = orjson.loads(meta_bytes)
        if not _valid_meta(meta, rows, lineage):
            return None
        classes = [
            (tuple((str(a), str(v)) for a, v in items), int(count))
            for items, count in meta["classes"]
        ]
        if sum(count for _, count in classes) != rows:
            return None
        codes, resid, scale, scale2 = _map_arrays(path, offset, rows, dim)
        return Image(
            dim,
            int(seq),
            codes,
            resid,
            scale,
            scale2,
            meta["ids"],
            classes,
            float(err1),
            float(err2),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, orjson.JSONDecodeError):
        return None
