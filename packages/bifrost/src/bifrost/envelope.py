"""Parsing the request envelope from raw body bytes, strictly.

Decisions where the wire spec is silent (documented in the README):
- the body must be UTF-8 (a BOM is refused) and strict JSON: ``NaN`` /
  ``Infinity`` literals, numbers that overflow a double (``1e400``), integers
  longer than 4300 digits, duplicate object keys, lone UTF-16 surrogates in
  strings and nesting deeper than :data:`MAX_DEPTH` are all
  ``bifrost.malformed_envelope``;
- ``wire_version``, ``call_id`` (1…256 chars) and ``verb`` are required
  strings; ``args`` is optional (default ``{}``) but must be an object;
  ``idempotency_key`` / ``idempotency_class`` are optional strings or null
  (their values are checked by the verb: ``<plane>.invalid_arguments``);
  verbs that take no idempotency key ignore one.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from bifrost.errors import MalformedEnvelope, UnsupportedWireVersion

__all__ = [
    "DEFAULT_MAX_JSON_CONTAINERS",
    "ENVELOPE_KEYS",
    "MAX_DEPTH",
    "WIRE_VERSION",
    "Envelope",
    "parse_envelope",
]

WIRE_VERSION = "0.6"
MAX_DEPTH = 64
MAX_CALL_ID_CHARS = 256
# Objects and arrays one body may hold. The largest legitimate body (1000 records,
# each an object with a scope object, an embedding array and some metadata) holds
# a few thousand; 8 MiB of ``[{},{},…]`` holds 2.8 million, and parsing and
# checking them cost seconds of CPU and hundreds of MB per request.
DEFAULT_MAX_JSON_CONTAINERS = 100_000
# A JSON string, so brackets inside strings are not counted as containers.
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
ENVELOPE_KEYS = frozenset(
    {"wire_version", "call_id", "verb", "args", "idempotency_key", "idempotency_class"}
)


@dataclass(frozen=True)
class Envelope:
    wire_version: str
    call_id: str
    verb: str
    args: dict[str, Any] = field(default_factory=dict)
    idempotency_key: str | None = None
    idempotency_class: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "wire_version": self.wire_version,
            "call_id": self.call_id,
            "verb": self.verb,
            "args": self.args,
        }
        if self.idempotency_key is not None:
            out["idempotency_key"] = self.idempotency_key
        if self.idempotency_class is not None:
            out["idempotency_class"] = self.idempotency_class
        return out

    @classmethod
    def from_dict(cls, obj: object) -> Envelope:
        """Validate an already-decoded envelope (a dict) and build it."""
        if not isinstance(obj, Mapping):
            raise MalformedEnvelope("envelope must be a JSON object")
        extra = set(obj) - ENVELOPE_KEYS
        if extra:
            raise MalformedEnvelope("envelope has unknown top-level keys")
        version = obj.get("wire_version")
        if not isinstance(version, str):
            raise MalformedEnvelope("wire_version is required and must be a string")
        if version != WIRE_VERSION:
            raise UnsupportedWireVersion(f"wire_version must be {WIRE_VERSION}")
        call_id = obj.get("call_id")
        if not isinstance(call_id, str) or not 1 <= len(call_id) <= MAX_CALL_ID_CHARS:
            raise MalformedEnvelope("call_id is required: a string of 1..256 characters")
        verb = obj.get("verb")
        if not isinstance(verb, str) or not verb:
            raise MalformedEnvelope("verb is required and must be a non-empty string")
        args = obj.get("args", {})
        if not isinstance(args, dict):
            raise MalformedEnvelope("args must be an object")
        for name in ("idempotency_key", "idempotency_class"):
            value = obj.get(name)
            if value is not None and not isinstance(value, str):
                raise MalformedEnvelope(f"{name} must be a string or null")
        return cls(
            wire_version=version,
            call_id=call_id,
            verb=verb,
            args=args,
            idempotency_key=obj.get("idempotency_key"),
            idempotency_class=obj.get("idempotency_class"),
        )


def _reject_constant(name: str) -> Any:
    raise MalformedEnvelope("body contains a non-finite number literal")


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise MalformedEnvelope("body contains a duplicate object key")
    return out


# Lists made only of these are judged in one C-level pass (an embedding, a list of ids).
_FLAT = frozenset({float, int, bool, type(None)})
# orjson reads an integer beyond 64 bits as a float at least this large.
_INT64_LIMIT = float(2**63)


@dataclass
class _Tally:
    """What the tree check counts for the fast path's duplicate-key proof."""

    keys: int = 0
    colons: int = 0
    big_float: bool = False


def _check_tree(root: Any, tally: _Tally) -> None:
    """Depth limit, no lone surrogates, no float outside the double range; counts object
    keys and the colons inside strings. Iterative (no recursion)."""
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            _check_str(node)
            tally.colons += node.count(":")
        elif isinstance(node, float):
            _check_floats([node], tally)
        elif isinstance(node, dict | list):
            if depth > MAX_DEPTH:
                raise MalformedEnvelope(f"body nests deeper than {MAX_DEPTH}")
            if isinstance(node, dict):
                tally.keys += len(node)
                for k, v in node.items():
                    _check_str(k)
                    tally.colons += k.count(":")
                    stack.append((v, depth + 1))
            elif (kinds := [*map(type, node)]).count(float) == len(kinds):
                # Only floats (an embedding): neither parser makes a non-finite one (orjson
                # refuses them, the strict parser's hooks too), so the bounds alone tell
                # whether one is as large as an integer orjson read beyond 64 bits; an
                # infinity would fall there too. Two C passes, no per-item abs().
                if node and (max(node) >= _INT64_LIMIT or min(node) <= -_INT64_LIMIT):
                    _check_floats(node, tally)
            elif set(kinds) <= _FLAT:
                _check_floats([v for v in node if type(v) is float], tally)
            else:
                stack.extend((v, depth + 1) for v in node)


def _check_floats(values: list[float], tally: _Tally) -> None:
    if not values:
        return
    # One C-level pass each: an infinity (the stdlib decoder reads 1e400 as one) and
    # the largest magnitude (where orjson read an integer beyond 64 bits).
    largest = max(map(abs, values))
    if not math.isfinite(largest):
        raise MalformedEnvelope("body contains a number outside the double range")
    if largest >= _INT64_LIMIT:
        tally.big_float = True


def _check_str(s: str) -> None:
    if not s.isascii():
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            raise MalformedEnvelope("body contains an unpaired surrogate escape") from None


def _orjson_tally(root: Any) -> tuple[int, int, bool]:
    """What :func:`_fast_decode` needs of a tree orjson parsed: the object keys it
    holds, the colons inside its strings (keys included) and whether a float is as
    large as an integer orjson read beyond 64 bits; nesting deeper than
    :data:`MAX_DEPTH` raises.

    orjson already refused what else :func:`_check_tree` looks for (lone surrogates,
    non-finite numbers), so only these are counted. Level by level (no recursion, no
    tuple per node): every string is gathered and their colons counted in one pass
    over their join, and a list of numbers (an embedding) is judged by its norm
    alone — ``hypot`` is at least the largest magnitude, so below the limit every
    element is; a list of anything else (a string, a container, null) makes
    ``hypot`` raise and is walked."""
    keys = 0
    strings: list[str] = []
    big = False
    kind = type(root)
    level: list[Any] = [root] if kind is dict or kind is list else []
    if kind is str:
        strings.append(root)
    elif kind is float and not -_INT64_LIMIT < root < _INT64_LIMIT:
        big = True
    depth = 1
    while level:
        if depth > MAX_DEPTH:
            raise MalformedEnvelope(f"body nests deeper than {MAX_DEPTH}")
        below: list[Any] = []
        for node in level:
            values: Any
            if type(node) is dict:
                keys += len(node)
                strings.extend(node)
                values = node.values()
            else:
                try:
                    if math.hypot(*node) < _INT64_LIMIT:
                        continue
                except TypeError:
                    pass
                values = node
            for value in values:
                kind = type(value)
                if kind is str:
                    strings.append(value)
                elif kind is dict or kind is list:
                    below.append(value)
                elif kind is float and not -_INT64_LIMIT < value < _INT64_LIMIT:
                    big = True
        level = below
        depth += 1
    return keys, "".join(strings).count(":"), big


def _fast_decode(body: bytes) -> Any:
    """orjson's parse when it provably equals the strict one, else None.

    orjson refuses what the strict parser refuses (invalid UTF-8, NaN and Infinity
    literals, numbers past the double range, lone surrogates) except two things,
    which are proven absent here: an integer beyond 64 bits (orjson makes it a float
    ≥ 2**63; any such float sends the body to the exact parser) and a duplicate key
    (orjson keeps the last). Every colon in the text separates a key or sits inside a
    string, so with no ``\\u003a`` escape in the text, colons in the text = keys in the
    text + colons in its strings; a dropped duplicate removes at least one key from
    the parsed tree and never adds a colon, so equality with the parsed tree's count
    proves there was none.
    """
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None  # the strict parser says precisely what is wrong
    keys, colons, big = _orjson_tally(value)
    if big or b"\\u003" in body or body.count(b":") != keys + colons:
        return None
    return value


def _strict_decode(text: str) -> Any:
    try:
        return json.loads(
            text,
            parse_constant=_reject_constant,
            parse_float=_parse_float,
            object_pairs_hook=_pairs,
        )
    except MalformedEnvelope:
        raise
    except RecursionError:
        raise MalformedEnvelope(f"body nests deeper than {MAX_DEPTH}") from None
    except ValueError:  # JSONDecodeError, over-long integer literals
        raise MalformedEnvelope("body is not valid JSON") from None


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise MalformedEnvelope("body contains a number outside the double range")
    return value


def _check_containers(body: bytes, limit: int) -> None:
    """At most ``limit`` objects and arrays, judged before parsing: counting the
    bracket bytes is an upper bound (one C pass); only a body over it pays for the
    exact count, with its strings cut out."""
    if body.count(b"{") + body.count(b"[") <= limit:
        return
    bare = _JSON_STRING.sub(b"", body)
    if bare.count(b"{") + bare.count(b"[") > limit:
        raise MalformedEnvelope(f"body holds more than {limit} JSON objects and arrays")


def decode_json(body: bytes, *, max_containers: int = DEFAULT_MAX_JSON_CONTAINERS) -> Any:
    """Strict JSON decode of raw bytes (see the module docstring): orjson when it
    provably agrees with the strict parser (nearly always), else the standard library
    with hooks (a tenth of the speed). A body holding more than ``max_containers``
    objects and arrays is refused before it is parsed."""
    if body.startswith(b"\xef\xbb\xbf"):
        raise MalformedEnvelope("body must be UTF-8 JSON without a byte order mark")
    _check_containers(body, max_containers)
    fast = _fast_decode(body)
    if fast is not None:
        return fast
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedEnvelope("body is not valid UTF-8") from None
    value = _strict_decode(text)
    _check_tree(value, _Tally())
    return value


def parse_envelope(body: bytes, *, max_containers: int = DEFAULT_MAX_JSON_CONTAINERS) -> Envelope:
    """Raw body bytes → :class:`Envelope`; ``MalformedEnvelope`` /
    ``UnsupportedWireVersion`` on failure."""
    return Envelope.from_dict(decode_json(body, max_containers=max_containers))
