"""The shared test helpers: bifrost.consumer.testing.helpers (envelopes, tokens) and
ratatoskr.memory.testing (chunks, embeddings) build what the wire and the store accept."""

from __future__ import annotations

import json

import pytest

from bifrost.auth import JwtVerifier
from bifrost.consumer.testing.helpers import envelope, envelope_bytes, signed_headers
from bifrost.envelope import WIRE_VERSION, parse_envelope
from bifrost.errors import Unauthenticated
from bifrost.memory.validation import validate_upsert
from ratatoskr.memory.testing import DIM, chunk, one_hot, seeded

KEY = b"helpers-key-0123456789abcdef-0123456789"


def test_envelope_is_what_the_wire_parses() -> None:
    env = envelope("upsert_many", {"records": []}, idempotency_key="k1")
    parsed = parse_envelope(json.dumps(env).encode())
    assert parsed.wire_version == WIRE_VERSION
    assert parsed.verb == "upsert_many"
    assert parsed.args == {"records": []}
    assert parsed.idempotency_key == "k1"
    assert parsed.call_id.startswith("call-")


def test_envelope_call_ids_are_fresh_unless_given() -> None:
    assert envelope("health")["call_id"] != envelope("health")["call_id"]
    assert envelope("health", call_id="c-7")["call_id"] == "c-7"
    assert envelope("health")["args"] == {}
    assert "idempotency_key" not in envelope("health")


def test_envelope_passes_extra_fields_as_they_are() -> None:
    env = envelope("get", {"chunk_id": "x"}, wire_version="0.7", admin=True)
    assert env["wire_version"] == "0.7"
    assert env["admin"] is True


def test_envelope_bytes_keep_non_ascii() -> None:
    body = envelope_bytes("get", {"chunk_id": "é"}, call_id="c")
    assert "é".encode() in body
    assert json.loads(body) == envelope("get", {"chunk_id": "é"}, call_id="c")


def test_signed_headers_carry_a_token_bound_to_the_body() -> None:
    body = envelope_bytes("search", {"vector": [1.0], "top_k": 1})
    headers = signed_headers(KEY, body, plane="memory", verb="search", scope={"tenant": "t"})
    assert headers["content-type"] == "application/json"
    scheme, token = headers["authorization"].split(" ", 1)
    assert scheme == "Bearer"
    verifier = JwtVerifier(KEY)
    claims = verifier.verify(token, body=body, plane="memory", verb="search")
    assert (claims.actor, claims.scope) == ("agent", {"tenant": "t"})
    other = signed_headers(KEY, body, plane="memory", verb="search")["authorization"][7:]
    with pytest.raises(Unauthenticated):
        verifier.verify(other, body=body + b" ", plane="memory", verb="search")


def test_one_hot_points_along_one_axis() -> None:
    assert one_hot(0) == [1.0] + [0.0] * (DIM - 1)
    assert one_hot(DIM + 2) == one_hot(2)
    assert one_hot(1, 3, rest=0.25) == [0.25, 1.0, 0.25]


def test_seeded_is_deterministic_per_seed() -> None:
    assert seeded(5) == seeded(5)
    assert seeded(5) != seeded(6)
    assert len(seeded(1, 16)) == 16
    assert all(-1 <= x <= 1 for x in seeded(3))


def test_chunk_is_a_record_the_store_accepts() -> None:
    scope = {"tenant": "t"}
    record = chunk("c1", one_hot(1), scope, content="hello", metadata={"k": 1})
    assert record == {
        "id": "c1",
        "embedding": one_hot(1),
        "scope": {"tenant": "t"},
        "content": "hello",
        "metadata": {"k": 1},
    }
    assert record["scope"] is not scope
    request = validate_upsert([record], None, "key-1", None, embedding_dim=DIM, max_batch=10)
    assert len(request.items) == 1


def test_chunk_defaults_to_an_empty_scope() -> None:
    assert chunk("c", (1.0, 0.0))["scope"] == {}
    assert chunk("c", (1.0, 0.0))["embedding"] == [1.0, 0.0]
