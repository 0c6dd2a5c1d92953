"""JSON in and out: strict parsing of request bodies and one canonical text per value.

Strict parsing refuses what Python's ``json`` would otherwise let through:
``NaN``/``Infinity`` literals, numbers that overflow a double (``1e400``),
duplicate object keys, invalid UTF-8 and absurd nesting. Canonical text
(sorted keys, no whitespace, shortest round-trip floats) is what the store
keeps, hashes and snapshots, so equal values always give equal bytes.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ratatoskr.vmp.errors import InvalidArgument

MAX_DEPTH = 64
# The largest canonical JSON text the store keeps in one field (a record's tags or
# metadata, a node's metadata). A snapshot decoder reads a field whole, so this, not
# the snapshot size, bounds what one field can make it hold in memory.
MAX_JSON_BYTES = 16 * 1024 * 1024


def _reject_constant(name: str) -> Any:
    raise InvalidArgument("NaN and Infinity are not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InvalidArgument("number is out of the range of a double")
    return value


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise InvalidArgument("duplicate key in JSON object")
    return obj


_DECODER = json.JSONDecoder(
    parse_float=_finite_float,
    parse_constant=_reject_constant,
    object_pairs_hook=_unique_object,
)


def strict_loads(data: bytes | str) -> Any:
    """Parse one JSON document strictly; raises InvalidArgument (content-free message)."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value = _DECODER.decode(text)
    except InvalidArgument:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        # ValueError covers JSONDecodeError and ints too long to convert.
        raise InvalidArgument("malformed JSON") from exc
    check_json_value(value)
    return value


def check_json_value(value: Any, *, _depth: int = 0) -> None:
    """Raise InvalidArgument unless ``value`` is plain JSON data.

    Plain means: None, bool, int, finite float, str (encodable as UTF-8), list, or
    dict with str keys, nested at most MAX_DEPTH deep.
    """
    if _depth > MAX_DEPTH:
        raise InvalidArgument(f"JSON nests deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, str):
        _check_text(value)
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgument("JSON numbers must be finite")
        return
    if isinstance(value, list):
        for item in value:
            check_json_value(item, _depth=_depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidArgument("JSON object keys must be strings")
            _check_text(key)
            check_json_value(item, _depth=_depth + 1)
        return
    raise InvalidArgument("value is not JSON data")


def _check_text(text: str) -> None:
    # JSON's \ud800 escapes can smuggle in lone surrogates, which have no UTF-8 form.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument("JSON strings must be valid Unicode") from exc


def canonical_json(value: Any) -> str:
    """The canonical text of a plain JSON value; raises InvalidArgument for anything else."""
    check_json_value(value)
    return dumps_checked(value)


def dumps_checked(value: Any) -> str:
    """The canonical text of a value :func:`strict_loads` returned (so already checked:
    this skips the second walk over it that :func:`canonical_json` would make)."""
    return json.dumps(
        value, ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
    )
