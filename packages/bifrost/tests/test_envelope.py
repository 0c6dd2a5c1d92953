"""Strict envelope parsing."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bifrost.envelope import MAX_DEPTH, Envelope, _strict_decode, decode_json, parse_envelope
from bifrost.errors import MalformedEnvelope, UnsupportedWireVersion


def env(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"wire_version": "0.6", "call_id": "c-1", "verb": "get", "args": {}}
    base.update(over)
    return {k: v for k, v in base.items() if v is not ...}


def raw(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def test_minimal_and_full() -> None:
    e = parse_envelope(raw(env(args=...)))
    assert e == Envelope("0.6", "c-1", "get", {}, None, None)
    full = env(args={"chunk_id": "x"}, idempotency_key="k", idempotency_class="durable")
    e = parse_envelope(raw(full))
    assert (e.args, e.idempotency_key, e.idempotency_class) == ({"chunk_id": "x"}, "k", "durable")
    assert e.to_dict() == full
    assert Envelope.from_dict(full) == e


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\xff\xfe{}",
        b"\xef\xbb\xbf" + raw(env()),
        '{"wire_version": "0.6", "call_id": "\xe9"}'.encode("latin-1"),
        b"null",
        b"[]",
        b'"string"',
        b"42",
        b'{"wire_version": "0.6", "call_id": "c", "verb": "get", "args": {"x": NaN}}',
        b'{"wire_version": "0.6", "call_id": "c", "verb": "get", "args": {"x": Infinity}}',
        b'{"wire_version": "0.6", "call_id": "c", "verb": "get", "args": {"x": -Infinity}}',
        b'{"wire_version": "0.6", "call_id": "c", "verb": "get", "args": {"x": 1e400}}',
        b'{"wire_version": "0.6", "call_id": "c", "verb": "get", "args": {"x": -1e400}}',
        b'{"wire_version": "0.6", "call_id": "c", "verb": "get", "verb": "get"}',
        b'{"wire_version": "0.6", "call_id": "c", "verb": "get", "args": {"a": 1, "a": 2}}',
        b'{"wire_version": "0.6", "call_id": "c", "verb": "get", "args": {"a": "\\ud800"}}',
        b'{"wire_version": "0.6", "call_id": "c", "verb": "get", "args": {"\\udc00": 1}}',
        b'{"wire_version": "0.6", "call_id": "c", "verb": "get", "args": {"a": '
        + b"1" * 5000
        + b"}}",
        b'{"wire_version": "0.6", "call_id": "c", "verb": "get",}',
        b"{'wire_version': '0.6'}",
    ],
)
def test_strict_json(body: bytes) -> None:
    with pytest.raises(MalformedEnvelope):
        parse_envelope(body)


def nested(depth: int) -> bytes:
    # The envelope itself is depth 1, args depth 2.
    inner = "[" * (depth - 2) + "]" * (depth - 2)
    return f'{{"wire_version": "0.6", "call_id": "c", "verb": "get", "args": {{"x": {inner}}}}}'.encode()


def test_depth_limit() -> None:
    assert parse_envelope(nested(MAX_DEPTH)).verb == "get"
    with pytest.raises(MalformedEnvelope, match="deeper"):
        parse_envelope(nested(MAX_DEPTH + 1))
    with pytest.raises(MalformedEnvelope):
        parse_envelope(b'{"args": ' + b"[" * 200_000 + b"]" * 200_000 + b"}")


def test_valid_unicode_and_numbers_kept() -> None:
    body = '{"wire_version": "0.6", "call_id": "c", "verb": "get", "args": {"a": "🦊 \\ud83e\\udd8a", "n": 1e308, "i": 12345678901234567890}}'
    e = parse_envelope(body.encode())
    assert e.args == {"a": "🦊 🦊", "n": 1e308, "i": 12345678901234567890}


@pytest.mark.parametrize(
    "obj",
    [
        env(extra=1),
        env(wire_version=...),
        env(wire_version=0.6),
        env(call_id=...),
        env(call_id=""),
        env(call_id=7),
        env(call_id="x" * 257),
        env(verb=...),
        env(verb=""),
        env(verb=["get"]),
        env(args=[]),
        env(args=None),
        env(args="x"),
        env(idempotency_key=5),
        env(idempotency_class=["default"]),
    ],
)
def test_envelope_fields(obj: dict[str, Any]) -> None:
    with pytest.raises(MalformedEnvelope):
        parse_envelope(raw(obj))


@pytest.mark.parametrize("version", ["0.5", "0.7", "1.0", "0.6.0", ""])
def test_unsupported_wire_version(version: str) -> None:
    with pytest.raises(UnsupportedWireVersion):
        parse_envelope(raw(env(wire_version=version)))


def test_null_idempotency_fields_allowed() -> None:
    e = parse_envelope(raw(env(idempotency_key=None, idempotency_class=None)))
    assert e.idempotency_key is None


# -- the orjson fast path agrees with the strict parser ------------------------------

_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.sampled_from('ab:"\\\u00e9\U0001f600 '), max_size=6),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(alphabet=st.sampled_from("ab:é"), max_size=3), children, max_size=4
        )
    ),
    max_leaves=20,
)


@given(_json_values)
def test_fast_and_strict_decoders_agree(value: Any) -> None:
    body = json.dumps(value, ensure_ascii=False).encode()
    strict = _strict_decode(body.decode())
    got = decode_json(body)
    assert got == strict
    assert json.dumps(got) == json.dumps(strict)  # same types (an int stays an int)


@pytest.mark.parametrize(
    "body",
    [
        b'{"a":1,"a":2}',
        b'{"a":"x:y","a":2}',
        b'{"a:":1,"a:":1}',
        b'{"k":{"a":1,"b":2},"k":{"a":1}}',
        b'{"a":1,"\\u0061":2}',
        b'{"a":"\\u003a","a":2,"b":":"}',
        b'{"a":"\\u003A\\u003a","b":1,"b":2}',
        b'[{"x":1},{"y":2,"y":3}]',
    ],
)
def test_duplicate_keys_refused_whatever_the_colons_and_escapes(body: bytes) -> None:
    with pytest.raises(MalformedEnvelope, match="duplicate"):
        decode_json(body)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"[18446744073709551616]", [18446744073709551616]),
        (b"[-9223372036854775809, 1.5]", [-9223372036854775809, 1.5]),
        (b"[9223372036854775808]", [9223372036854775808]),
        (b'{"t":"12:30","u":"a:b:c"}', {"t": "12:30", "u": "a:b:c"}),
        (b'{"a":"\\u003a"}', {"a": ":"}),
    ],
)
def test_big_integers_and_colons_stay_exact(body: bytes, expected: Any) -> None:
    got = decode_json(body)
    assert got == expected
    assert [type(x) for x in (got if isinstance(got, list) else got.values())] == [
        type(x) for x in (expected if isinstance(expected, list) else expected.values())
    ]


@pytest.mark.parametrize(
    "value",
    [
        [0.25] * 383 + [2**70],  # an embedding-sized list hiding an integer past 64 bits
        [5e18] * 16,  # its norm passes 2**63 while no element does
        [1.5, -(2**64), "x:y"],
        {"e": [0.5, 2**65], "k": [[1.0, 2**66]]},
    ],
)
def test_number_lists_keep_big_integers_exact(value: Any) -> None:
    body = json.dumps(value).encode()
    got = decode_json(body)
    assert got == value
    assert json.dumps(got) == json.dumps(value)


@pytest.mark.parametrize("inner", [b"1.0", b"null", b'"a:b"'])
def test_nesting_limit_holds_through_number_lists(inner: bytes) -> None:
    ok = b"[" * (MAX_DEPTH - 1) + b"[0.5," + inner + b"]" + b"]" * (MAX_DEPTH - 1)
    assert decode_json(ok) is not None
    deep = b"[" * MAX_DEPTH + b"[0.5," + inner + b"]" + b"]" * MAX_DEPTH
    with pytest.raises(MalformedEnvelope, match="deeper"):
        decode_json(deep)


def test_parse_bomb_refused_before_parsing_and_fast() -> None:
    items = b",".join([b"{}"] * 2_000_000)
    body = b'{"wire_version":"0.6","call_id":"c","verb":"get","args":{"x":[' + items + b"]}}"
    start = time.perf_counter()
    with pytest.raises(MalformedEnvelope, match="more than 100000 JSON objects"):
        parse_envelope(body)
    # Milliseconds, not the seconds a full parse took (a wide margin for a noisy machine).
    assert time.perf_counter() - start < 1.0


def test_brackets_inside_strings_are_not_containers() -> None:
    text = "{[" * 60_000
    body = raw(env(args={"chunk_id": text, "more": ['"{' * 10]}))
    assert parse_envelope(body).args["chunk_id"] == text
    assert parse_envelope(raw(env(args={"x": [[]] * 5})), max_containers=8).args == {"x": [[]] * 5}
    with pytest.raises(MalformedEnvelope):  # envelope, args, x and its five members: 8
        parse_envelope(raw(env(args={"x": [[]] * 5})), max_containers=7)
