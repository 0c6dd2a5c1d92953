"""How a chunk is stored, and the exact float64 scoring of stored chunks.

A chunk is stored in one of three forms (INV-001 holds for each: every read gives
back an object equal to the record written, with the same JSON types):

- **binary** (every element of the embedding is a JSON float, which is what
  embedding models send): ``record_json`` is the record *without* its embedding
  field, ``embedding_f64`` the embedding as little-endian float64 and
  ``embedding_key`` the field it came from (``embedding`` or ``vector``). A
  Python float is a float64, so this is lossless: the sign of -0.0, subnormals
  and ±1e308 come back bit for bit. 384 floats take 3 KB instead of ~7.5 KB of
  text, and a search that does not return the embedding never parses it.
- **binary float32** (the SQLite store, since its migration 7): the binary form
  whose every element survives float64 → float32 → float64 bit for bit (-0.0 and
  float32-representable subnormals included), which is what a client holding numpy
  float32 sends: ``embedding_f32`` holds it as little-endian float32 instead of
  ``embedding_f64`` (1.5 KB instead of 3 KB at 384 dims), and reads widen it back
  to the same Python floats. Any other float (more digits, beyond float32's range)
  keeps float64.
- **JSON** (any element is an int — it must come back an int, and a big one may
  not fit a float64): the whole record sits in ``record_json``, as in schema v1;
  ``embedding_key`` and the blobs are NULL.

``record_json`` is canonical JSON written and parsed by bifrost's orjson-backed
codec: formatting and parsing floats with the standard library were the two
slowest steps of a write and of a search.

Search results are ranked and rendered here too, once for every memory backend
(:func:`search_rows`): a backend finds the candidates, these give its answer.

Unit vectors are made here, once, for every memory backend (:func:`unit_rows`,
and :func:`unit_float64` / :func:`unit_float32_rows` on top of it): what vec0,
pgvector and the in-process index hold, the query a search scores with, and the
exact float64 re-rank all scale and normalise the same way.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from bifrost.jsoncodec import canonical_json, json_loads_exact
from bifrost.memory.validation import SearchQuery, ValidatedChunk, embedding_field, search_row

# Little-endian whatever the host, so a file moves between machines unchanged.
_F64 = np.dtype("<f8")
_F32 = np.dtype("<f4")


@dataclass(frozen=True)
class StoredForm:
    """The columns a record is written as."""

    record_json: str
    embedding_key: str | None
    embedding_f64: bytes | None
    embedding_f32: bytes | None = None  # instead of embedding_f64 (see narrow_rows)


def stored_form(record: dict[str, Any]) -> StoredForm:
    """How a validated record is written: binary when every embedding element is a
    float, else the whole record as JSON."""
    return _form(record, None)


def _form(
    record: dict[str, Any], blob: bytes | None, *, floats: bool = False, plain: bool = False
) -> StoredForm:
    """:func:`stored_form`, with the embedding's float64 bytes when the caller packed
    them already (``blob``), and what validation found (``floats``: every embedding
    element a float; ``plain``: orjson alone writes the record — see
    :class:`~bifrost.memory.validation.ValidatedChunk`), so neither is looked for again."""
    key = embedding_field(record)
    values = record[key]
    # ``type(x) is float`` for every element (C-level; counting the exact type is one
    # pass, identity first), not isinstance: a bool is already refused by validation,
    # and an int must stay an int.
    if not floats and [*map(type, values)].count(float) != len(values):
        return StoredForm(encode(record), None, None)
    rest = {k: v for k, v in record.items() if k != key}
    if blob is None:
        # struct rather than numpy: half the cost for a few hundred floats, same bytes.
        blob = struct.pack(f"<{len(values)}d", *values)
    if plain:  # canonical_json would walk it for NaN and big integers, then call orjson
        return StoredForm(orjson.dumps(rest, option=orjson.OPT_SORT_KEYS).decode(), key, blob)
    return StoredForm(encode(rest), key, blob)


def stored_forms(
    chunks: Sequence[ValidatedChunk], dim: int
) -> tuple[list[StoredForm], npt.NDArray[np.float32]]:
    """:func:`stored_form` of each chunk's record and :func:`unit_float32_rows` of
    their embeddings (what a write stores), from one float64 matrix: each validated
    embedding is packed once as little-endian float64 — the blob of a binary-form
    record (its elements are the embedding's own floats) and a row of the matrix the
    unit rows are made from (the values ``np.array`` of the lists would hold).

    A binary-form record whose embedding is float32-exact gets its float32 blob
    instead (:func:`narrow_rows`; both stores' schemas have the column since their
    migration 7)."""
    if not chunks:
        return [], np.zeros((0, dim), dtype=np.float32)
    pack = struct.Struct(f"<{dim}d").pack
    blobs = [pack(*c.embedding) for c in chunks]
    matrix = np.frombuffer(b"".join(blobs), dtype=_F64).reshape(len(blobs), dim)
    forms = [
        _form(c.record, blob, floats=c.floats, plain=c.plain)
        for c, blob in zip(chunks, blobs, strict=True)
    ]
    forms = [
        StoredForm(f.record_json, f.embedding_key, None, f32)
        if f32 is not None and f.embedding_key is not None
        else f
        for f, f32 in zip(forms, narrow_rows(matrix), strict=True)
    ]
    return forms, unit_rows(matrix).astype(np.float32)


def narrow_rows(matrix: npt.NDArray[np.float64]) -> list[bytes | None]:
    """For each row of a float64 matrix, its little-endian float32 bytes when every
    element survives float64 → float32 → float64 bit for bit (compared as bits: the
    sign of -0.0 counts, and a float32 subnormal is exact), else None (more digits
    than float32 holds, or beyond its range)."""
    m = np.ascontiguousarray(matrix, dtype=_F64)
    with np.errstate(over="ignore"):  # 1e308 becomes inf: not exact, stays float64
        m32 = m.astype(_F32)
    exact = (m32.astype(_F64).view(np.int64) == m.view(np.int64)).all(axis=1)
    return [row.tobytes() if ok else None for row, ok in zip(m32, exact.tolist(), strict=True)]


def encode(record: dict[str, Any]) -> str:
    """Canonical JSON of a (validated) record or of its part without the embedding."""
    return canonical_json(record).decode("utf-8")


# Any integer orjson could misread (|n| >= 2**63) is written with 19 digits or more.
_LONG_DIGITS = re.compile(r"[0-9]{19}")


def load_json(record_json: str) -> dict[str, Any]:
    """``record_json`` parsed exactly (integers beyond 64 bits stay integers).

    orjson alone when the text holds no run of 19 digits: then every integer in it is
    below 10**18 and orjson reads it exactly, and no float that large can stand for an
    integer, so bifrost's exact parser would return the same value after walking the
    whole record (several times orjson's cost for a search hit). A run of 19 digits
    anywhere (a long number inside a string included) takes the exact path.
    """
    if _LONG_DIGITS.search(record_json) is None:
        try:
            fast: dict[str, Any] = orjson.loads(record_json)
        except orjson.JSONDecodeError:
            pass
        else:
            return fast
    loaded: dict[str, Any] = json_loads_exact(record_json)
    return loaded


class StoredChunk:
    """One stored row as read. ``rest`` is ``record_json`` parsed (the whole record in
    the JSON form, the record without its embedding in the binary form), parsed on
    first use only: a search candidate that does not make the answer is never decoded."""

    __slots__ = (
        "_rest",
        "embedding_f32",
        "embedding_f64",
        "embedding_key",
        "record_json",
        "revision",
    )

    def __init__(
        self,
        record_json: str,
        embedding_key: str | None,
        embedding_f64: bytes | None,
        revision: int,
        embedding_f32: bytes | None = None,
    ) -> None:
        self.record_json = record_json
        self.embedding_key = embedding_key
        self.embedding_f64 = embedding_f64
        self.revision = revision
        self.embedding_f32 = embedding_f32
        self._rest: dict[str, Any] | None = None

    @property
    def rest(self) -> dict[str, Any]:
        if self._rest is None:
            self._rest = load_json(self.record_json)
        return self._rest

    def record(self) -> dict[str, Any]:
        """The record as written (keys sorted, as canonical JSON would give them)."""
        if self.embedding_key is None or (
            self.embedding_f64 is None and self.embedding_f32 is None
        ):
            return self.rest
        full = dict(self.rest)
        # tolist() makes Python floats: exact, -0.0 and subnormals included (a float32
        # widens to float64 exactly).
        full[self.embedding_key] = self.vector().tolist()
        return dict(sorted(full.items()))

    def without_embedding(self) -> dict[str, Any]:
        """The record without its embedding field, never building the embedding list."""
        if self.embedding_key is not None:
            return self.rest
        key = embedding_field(self.rest)
        return {k: v for k, v in self.rest.items() if k != key}

    def vector(self) -> npt.NDArray[np.float64]:
        """The embedding as float64 (a view of the blob in the binary form)."""
        if self.embedding_f64 is not None:
            return np.frombuffer(self.embedding_f64, dtype=_F64)
        if self.embedding_f32 is not None:
            return np.frombuffer(self.embedding_f32, dtype=_F32).astype(_F64)
        return np.asarray(self.rest[embedding_field(self.rest)], dtype=np.float64)


def unit_rows(rows: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
    """Each row of ``rows`` divided by its norm, in float64.

    Rows are scaled by their largest component first, so that neither huge (1e308)
    nor subnormal (5e-324) components overflow or vanish. Only element-wise
    operations and row-wise reductions are used, never a BLAS product, whose result
    for a row can depend on where the row sits in the batch: equal rows give
    bit-equal unit vectors wherever they are. Every row must have a non-zero finite
    component (bifrost's validation guarantees it of an embedding).
    """
    m = np.asarray(rows, dtype=np.float64)
    # The ufuncs' own reductions: what np.max / np.sum call, without their Python
    # wrappers (a search normalises its query and its candidates: microseconds each).
    m = m / np.maximum.reduce(np.abs(m), axis=1, keepdims=True)
    out: npt.NDArray[np.float64] = m / np.sqrt(np.add.reduce(m * m, axis=1, keepdims=True))
    return out


def unit_float64(values: Sequence[float] | npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
    """One vector as :func:`unit_rows` makes it (a search's exact query)."""
    # A list (what validation gives) converts element by element either way; fromiter
    # skips asarray's shape discovery (half its cost at 384 floats), same values.
    v = (
        np.fromiter(values, dtype=np.float64, count=len(values))
        if isinstance(values, list)
        else np.asarray(values, dtype=np.float64).reshape(-1)
    )
    # unit_rows' steps on the vector itself: dividing by a scalar is the same IEEE
    # division per element, and the sum over one contiguous vector is the same
    # pairwise summation as over a row (the tests hold the bits equal).
    v = v / np.maximum.reduce(np.abs(v))
    out: npt.NDArray[np.float64] = v / np.sqrt(np.add.reduce(v * v))
    return out


def unit_float32(values: Sequence[float] | npt.NDArray[np.floating]) -> npt.NDArray[np.float32]:
    """:func:`unit_float64` rounded to float32 (what vec0 holds and the index codes)."""
    out: npt.NDArray[np.float32] = unit_float64(values).astype(np.float32)
    return out


def unit_float32_rows(embeddings: Sequence[Sequence[float]], dim: int) -> npt.NDArray[np.float32]:
    """:func:`unit_rows` of a batch of validated embeddings, rounded to float32 (what
    vec0, pgvector and the in-process index hold); ``(0, dim)`` for an empty batch."""
    if not embeddings:
        return np.zeros((0, dim), dtype=np.float32)
    return unit_rows(np.array(embeddings, dtype=np.float64)).astype(np.float32)


def exact_scores(
    raw: list[npt.NDArray[np.float64]] | npt.NDArray[np.float64],
    exact_query: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Cosine of each raw embedding (a list of rows, or the rows as one ``n × d``
    matrix: the same bits either way) with the float64 unit ``exact_query``, clamped to
    [-1, 1]: the rows made unit by :func:`unit_rows` (equal embeddings get bit-equal
    scores, so ties fall to chunk_id).
    """
    if len(raw) == 0:
        return np.zeros(0, dtype=np.float64)
    m = unit_rows(raw if isinstance(raw, np.ndarray) else np.stack(raw))
    # np.clip's bits (no NaN can arise), without its wrapper.
    dots = np.add.reduce(m * exact_query, axis=1)
    scores: npt.NDArray[np.float64] = np.minimum(np.maximum(dots, -1.0), 1.0)
    return scores


def _raw_rows(
    chunks: Sequence[StoredChunk],
) -> list[npt.NDArray[np.float64]] | npt.NDArray[np.float64]:
    """The candidates' raw embeddings: one buffer of their blobs when every one is in
    the same binary form (one numpy call instead of one per candidate; float32 widens
    exactly, so the rows hold the same values either way)."""
    for dtype, blobs in (
        (_F64, [c.embedding_f64 for c in chunks]),
        (_F32, [c.embedding_f32 for c in chunks]),
    ):
        if blobs and None not in blobs:
            joined = b"".join(b for b in blobs if b is not None)
            rows: npt.NDArray[np.float64] = (
                np.frombuffer(joined, dtype=dtype).reshape(len(blobs), -1).astype(_F64, copy=False)
            )
            return rows
    return [c.vector() for c in chunks]


def search_rows(
    found: Mapping[str, StoredChunk],
    exact_query: npt.NDArray[np.float64],
    query: SearchQuery,
) -> list[dict[str, Any]]:
    """The rows of ``query`` from its candidates ``found`` (id → stored chunk): scored in
    float64 with :func:`exact_scores` against the unit ``exact_query``, best first with
    ties by chunk_id, the first ``top_k`` as bifrost's ``search_row``."""
    ids = list(found)
    scores = exact_scores(_raw_rows([found[cid] for cid in ids]), exact_query)
    ranked = sorted(zip((-scores).tolist(), ids, strict=True))[: query.top_k]
    rows: list[dict[str, Any]] = []
    for neg, cid in ranked:
        hit = found[cid]
        if query.include_embedding:
            rows.append(search_row(hit.record(), cid, -neg, hit.revision, True))
        else:
            # Dropped here, not by search_row: without its embedding the record may
            # still hold a ``vector`` field (opaque when ``embedding`` was the
            # embedding), which search_row would then take for the embedding.
            rows.append(search_row(hit.without_embedding(), cid, -neg, hit.revision, True))
    return rows
