"""The wire's JSON codec: canonical JSON out, exact JSON in.

:func:`canonical_json` is the one serialisation every digest, ledger id and
stored record goes through (sorted keys, no whitespace, UTF-8, NaN/Infinity
refused); :func:`json_loads_exact` reads it back without losing integers beyond
64 bits. orjson does the work where it can; the standard library takes over
exactly where orjson would be wrong.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["canonical_json", "json_loads_exact", "no_int64_overflow"]

_SCALARS = frozenset({str, int, bool, type(None)})
_INT64_LIMIT = float(2**63)


def _every_float(
    obj: Any, ok: Callable[[float], bool], ok_list: Callable[[list[float]], bool]
) -> bool:
    """Whether every float in ``obj`` passes ``ok``; a list made only of floats (an
    embedding: hundreds of them) is judged at once by ``ok_list``, in C."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not ok(item):
                return False
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            # C-level passes, unlike a generator over the items; counting the exact type
            # (identity first) settles an all-float list faster than a set of the types.
            types = [*map(type, item)]
            if types and types.count(float) == len(types):
                if not ok_list(item):  # type: ignore[arg-type]
                    return False
            elif not set(types) <= _SCALARS:
                stack.extend(item)
    return True


def _finite_list(values: list[float]) -> bool:
    # A NaN or an infinity makes the sum non-finite; an overflowing sum of finite
    # values only costs the element-wise check.
    return math.isfinite(sum(values)) or all(map(math.isfinite, values))


def _all_finite(obj: Any) -> bool:
    """No NaN or ±Infinity anywhere in ``obj`` (JSON cannot carry them)."""
    return _every_float(obj, math.isfinite, _finite_list)


def no_int64_overflow(obj: Any) -> bool:
    """No float as large as 2**63: where orjson read an integer beyond 64 bits, it made
    such a float (a genuine float that large only costs a second, exact parse)."""
    return _every_float(
        obj, lambda f: abs(f) < _INT64_LIMIT, lambda fs: max(map(abs, fs)) < _INT64_LIMIT
    )


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8 (not ASCII-escaped), NaN/Infinity refused.

    orjson writes it (formatting floats is the slowest step of a write in the
    standard library); integers beyond 64 bits, which orjson refuses, go through
    the standard library, as do values orjson does not know. Raises
    ``ValueError``/``TypeError`` for values JSON cannot carry.
    """
    if not _all_finite(obj):
        raise ValueError("NaN and Infinity are not JSON")
    try:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return json.dumps(
            obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode("utf-8")


_no_int64_overflow = no_int64_overflow  # the name the tests of the fast paths use


def json_loads_exact(data: bytes | str) -> Any:
    """Parse JSON that :func:`canonical_json` (or any strict writer) produced, fast and
    exactly: orjson, except that orjson reads an integer beyond 64 bits as a float —
    when the result holds a float that large, the text is parsed again by the
    standard library, which keeps such integers exact."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        # orjson also refuses integers past the double range (10**309 and up).
        return json.loads(data)
    if no_int64_overflow(value):
        return value
    return json.loads(data)
