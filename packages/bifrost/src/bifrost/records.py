"""Validators every plane applies to the records and ids of a call.

What is not a rule of one plane lives here: ids (a non-empty string of at most
512 bytes UTF-8), lists of ids, a batch of record objects, the private copy a
store keeps of a record, ``expected_revisions`` and the label that names a
record in an error message. ``bifrost.memory.validation`` and
``bifrost.affect.validation`` build on these (and re-export what their public
surface had).

Every function raises ``InvalidArguments`` with a message that names the failing
record by its index in the batch (or the failing argument), never by its content
or its scope values.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

import orjson

from bifrost.errors import InvalidArguments
from bifrost.jsoncodec import canonical_json, json_loads_exact
from bifrost.scope import validate_record_scope

__all__ = [
    "DEFAULT_MAX_BATCH",
    "MAX_ID_BYTES",
    "CanonicalBatch",
    "canonical_copy",
    "canonical_record",
    "claim_id",
    "distinct_ids",
    "json_copy",
    "load_canonical",
    "record_label",
    "required_scope",
    "validate_expected_revisions",
    "validate_id",
    "validate_ids",
    "validate_records_common",
]

DEFAULT_MAX_BATCH = 1000
MAX_ID_BYTES = 512


def record_label(index: int | None) -> str:
    """How an error names a record: ``"record"`` alone, or ``"record 3"`` in a batch."""
    return "record" if index is None else f"record {index}"


def validate_id(value: object, what: str = "id") -> str:
    """A non-empty string of at most 512 bytes UTF-8 (lone surrogates refused)."""
    if not isinstance(value, str) or not value:
        raise InvalidArguments(f"{what} must be a non-empty string")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArguments(f"{what} is not valid unicode") from None
    if size > MAX_ID_BYTES:
        raise InvalidArguments(f"{what} longer than {MAX_ID_BYTES} bytes UTF-8")
    return value


def validate_ids(ids: object, *, max_batch: int, what: str = "ids") -> list[str]:
    """A list of at most ``max_batch`` ids (each a valid id). Order and duplicates kept."""
    if not isinstance(ids, list):
        raise InvalidArguments(f"{what} must be a list of strings")
    if len(ids) > max_batch:
        raise InvalidArguments(
            f"{what}: {len(ids)} exceeds max_batch {max_batch} (RATATOSKR_MAX_BATCH)"
        )
    return [validate_id(x, f"{what}[{i}]") for i, x in enumerate(ids)]


def distinct_ids(ids: object, *, max_batch: int, what: str = "ids") -> list[str]:
    """:func:`validate_ids`, each id once, in the order first given (what a read or a
    delete of a list of ids acts on)."""
    return list(dict.fromkeys(validate_ids(ids, max_batch=max_batch, what=what)))


def claim_id(seen: dict[str, int], rid: str, index: int, what: str = "an id") -> None:
    """Note that record ``index`` of a batch has id ``rid`` in ``seen`` (id → first
    index); ``InvalidArguments`` naming both records when an earlier one had it."""
    first = seen.setdefault(rid, index)
    if first != index:
        raise InvalidArguments(f"records {first} and {index} share {what}")


def canonical_record(record: dict[str, Any], index: int | None = None) -> tuple[bytes, bool]:
    """The canonical JSON of ``record`` (:func:`bifrost.jsoncodec.canonical_json`'s bytes)
    and whether orjson wrote it alone: then plain orjson parses it back exactly and it
    is, byte for byte, the record's part of its batch's canonical JSON (see
    :func:`bifrost.writes.digest_of_canonical`).

    Fast where records are plain JSON: orjson writes NaN and ±Infinity as ``null``, so
    its output without a ``null`` cannot have held one and needs no further check;
    output with one, and what orjson refuses (integers past 64 bits), go through the
    codec. Raises InvalidArguments for what JSON cannot carry.
    """
    try:
        data: bytes | None = orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        data = None
    if data is not None and b"null" not in data:
        return data, True
    try:
        checked = canonical_json(record)
    except (TypeError, ValueError, RecursionError):
        # RecursionError: nested deeper than the standard library's writer can go.
        raise InvalidArguments(f"{record_label(index)}: not JSON-serialisable") from None
    return checked, data is not None


def load_canonical(data: bytes | str, plain: bool) -> dict[str, Any]:
    """A record's canonical JSON parsed exactly: plain orjson when orjson wrote it alone
    (``plain``, see :func:`canonical_record`), else the codec's exact parse."""
    loaded: dict[str, Any] = orjson.loads(data) if plain else json_loads_exact(data)
    return loaded


class _NotPlain(Exception):
    """A value :func:`_plain_copy` leaves to the exact parse (see :func:`canonical_copy`)."""


# Exact types (not subclasses): orjson writes these as themselves and reads them back
# as the same type with an equal value. Floats are checked for finiteness apart.
_PLAIN_LEAVES = frozenset({str, int, bool, type(None)})
_PLAIN_SCALARS = _PLAIN_LEAVES | {float}


def _plain_list(items: list[Any]) -> list[Any]:
    kinds = set(map(type, items))  # C-level, unlike a generator over the items
    if kinds <= _PLAIN_LEAVES:
        return list(items)
    if kinds <= _PLAIN_SCALARS:
        # A NaN or an infinity makes the sum non-finite; an overflowing sum of finite
        # floats only costs the element-wise check.
        floats = [x for x in items if type(x) is float] if len(kinds) > 1 else items
        if math.isfinite(sum(floats)) or all(map(math.isfinite, floats)):
            return list(items)
        raise _NotPlain
    return [_plain_copy(x) for x in items]


def _plain_copy(value: Any) -> Any:
    """``value`` copied, keys sorted, when it is made only of exact JSON types (dict with
    str keys, list, str, int, finite float, bool, None): then it equals, type for type,
    what parsing its canonical JSON gives. Raises :class:`_NotPlain` otherwise."""
    kind = type(value)
    if kind is float:
        if math.isfinite(value):
            return value
        raise _NotPlain
    if kind in _PLAIN_LEAVES:
        return value
    if kind is list:
        return _plain_list(value)
    if kind is dict:
        return _plain_dict(value, None)
    raise _NotPlain


def _plain_dict(value: dict[Any, Any], floats_key: str | None) -> dict[str, Any]:
    try:
        keys = sorted(value)
    except TypeError:  # keys of several types (only strings are plain)
        raise _NotPlain from None
    out: dict[str, Any] = {}
    # The leaves of a record are most of its values: judged here, without a call each.
    for key in keys:
        if type(key) is not str:
            raise _NotPlain
        item = value[key]
        kind = type(item)
        if kind in _PLAIN_LEAVES:
            out[key] = item
        elif kind is float:
            if not math.isfinite(item):
                raise _NotPlain
            out[key] = item
        elif key == floats_key:
            out[key] = list(item)
        elif kind is list:
            out[key] = _plain_list(item)
        elif kind is dict:
            out[key] = _plain_dict(item, None)
        else:
            raise _NotPlain
    return out


def canonical_copy(
    record: dict[str, Any], index: int | None = None, *, floats_key: str | None = None
) -> tuple[bytes, bool, dict[str, Any]]:
    """:func:`canonical_record` of ``record`` and a private copy of it equal, type for
    type and in key order, to :func:`load_canonical` of those bytes — without parsing
    them back.

    When orjson writes the record and it is made only of exact JSON types with finite
    floats, the copy is made directly (strings and numbers are immutable and shared;
    dicts and lists are new); anything else (tuples, subclasses, integers past 64 bits,
    NaN, non-string keys, …) takes :func:`canonical_record` and the exact parse, so the
    result and every refusal are theirs. ``floats_key`` names a top-level field the
    caller has already found to be a list of finite floats (exact type), copied
    without looking again. Raises InvalidArguments for what JSON cannot carry.
    """
    try:
        data: bytes | None = orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        data = None
    if data is not None:
        try:
            return data, True, _plain_dict(record, floats_key)
        except _NotPlain:
            pass
    text, plain = canonical_record(record, index)
    return text, plain, load_canonical(text, plain)


class CanonicalBatch:
    """The canonical JSON of a batch's records, made once each as validation reaches
    them (:meth:`add`); :attr:`records_json` gives every text at the end when orjson
    alone wrote them all, so the request digest composes from them
    (:func:`bifrost.writes.digest_of_canonical`)."""

    def __init__(self) -> None:
        self._texts: list[bytes] = []
        self._plain = True

    def add(self, record: dict[str, Any], index: int) -> tuple[bytes, bool]:
        """:func:`canonical_record` of record ``index``, kept. Raises InvalidArguments."""
        text, plain = canonical_record(record, index)
        self._texts.append(text)
        self._plain = self._plain and plain
        return text, plain

    def add_copy(
        self, record: dict[str, Any], index: int, *, floats_key: str | None = None
    ) -> tuple[dict[str, Any], bool]:
        """:func:`canonical_copy` of record ``index``: its text kept; its private copy
        returned, and whether orjson alone wrote the text. Raises InvalidArguments."""
        text, plain, copy = canonical_copy(record, index, floats_key=floats_key)
        self._texts.append(text)
        self._plain = self._plain and plain
        return copy, plain

    @property
    def records_json(self) -> list[bytes] | None:
        """Every record's text when all are plain (see :func:`canonical_record`), else None."""
        return self._texts if self._plain else None


def json_copy(record: dict[str, Any], index: int | None = None) -> dict[str, Any]:
    """A private deep copy via canonical JSON (refuses what JSON cannot carry)."""
    return canonical_copy(record, index)[2]


def validate_records_common(
    records: object, *, max_batch: int, what: str = "records"
) -> list[dict[str, Any]]:
    """``records`` is a list of at most ``max_batch`` objects."""
    if not isinstance(records, list):
        raise InvalidArguments(f"{what} must be a list")
    if len(records) > max_batch:
        raise InvalidArguments(
            f"{what}: {len(records)} exceeds max_batch {max_batch} (RATATOSKR_MAX_BATCH)"
        )
    for i, r in enumerate(records):
        if not isinstance(r, dict):
            raise InvalidArguments(f"{record_label(i)}: must be an object")
    return records


def required_scope(record: dict[str, Any], where: str) -> dict[str, str]:
    """A record's ``scope``: required (``{}`` for unscoped) and a valid record scope
    (:func:`bifrost.scope.validate_record_scope`). Raises InvalidArguments."""
    if "scope" not in record:
        raise InvalidArguments(f"{where}: missing scope (use {{}} for unscoped)")
    return validate_record_scope(record["scope"], f"{where}: scope")


def validate_expected_revisions(expected: object, ids: Collection[str]) -> dict[str, int]:
    """``expected_revisions``: null (no expectation) or an object whose keys are ids of
    this batch and whose values are integers ≥ 0 (0: the id must not exist yet).
    Returns a typed copy in the order given (the order revisions are checked in)."""
    if expected is None:
        return {}
    if not isinstance(expected, dict):
        raise InvalidArguments("expected_revisions must be an object or null")
    out: dict[str, int] = {}
    for k, v in expected.items():
        if not isinstance(k, str) or k not in ids:
            raise InvalidArguments("expected_revisions names an id not in this batch")
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InvalidArguments("expected_revisions values must be integers >= 0")
        out[k] = v
    return out
