"""Strict envelope parsing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bifrost.envelope import MAX_DEPTH, Envelope, parse_envelope
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
