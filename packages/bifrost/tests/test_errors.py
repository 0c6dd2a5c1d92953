"""``bifrost.errors``: every wire error declared once, with its code, status and prefix."""

from __future__ import annotations

import pytest

from bifrost.client import WrongBaseURL
from bifrost.errors import (
    BifrostError,
    Forbidden,
    IdempotencyConflict,
    Internal,
    InvalidArguments,
    InvalidFilter,
    MalformedEnvelope,
    PayloadTooLarge,
    RevisionMismatch,
    Unauthenticated,
    Unavailable,
    UnknownVerb,
    UnsupportedVerb,
    UnsupportedWireVersion,
    error_from_wire,
    render_error,
)

# shared/spec/bifrost-wire.md, "Errors": class, wire code on the memory plane, HTTP status.
WIRE_TABLE: list[tuple[type[BifrostError], str, int]] = [
    (MalformedEnvelope, "bifrost.malformed_envelope", 400),
    (UnsupportedWireVersion, "bifrost.unsupported_wire_version", 400),
    (UnknownVerb, "bifrost.unknown_verb", 400),
    (Unauthenticated, "bifrost.unauthenticated", 401),
    (Forbidden, "bifrost.forbidden", 403),
    (UnsupportedVerb, "memory.unsupported_verb", 501),
    (PayloadTooLarge, "bifrost.payload_too_large", 413),
    (InvalidArguments, "memory.invalid_arguments", 400),
    (InvalidFilter, "memory.invalid_filter", 400),
    (IdempotencyConflict, "memory.idempotency_conflict", 409),
    (Internal, "bifrost.internal", 500),
    (Unavailable, "bifrost.unavailable", 503),  # ours: storage gone or failing over
]


@pytest.mark.parametrize(("cls", "code", "status"), WIRE_TABLE)
def test_each_error_renders_its_code_and_status(
    cls: type[BifrostError], code: str, status: int
) -> None:
    rendered_status, body = render_error(cls("what failed"), plane="memory", call_id="c")
    assert (rendered_status, body["error"]["code"]) == (status, code)
    assert body["error"]["message"] == "what failed"
    affect_code = code.replace("memory.", "affect.")
    assert cls("x").wire_code("affect") == affect_code
    back = error_from_wire(affect_code, "m", {"k": 1}, status)
    assert type(back) is cls
    assert (back.wire_code(), back.status, back.message, back.details) == (
        affect_code,
        status,
        "m",
        {"k": 1},
    )


def test_revision_mismatch_keeps_its_details_both_ways() -> None:
    err = RevisionMismatch("c1", 2, 3)
    status, body = render_error(err, plane="affect", call_id=None)
    assert (status, body["error"]["code"]) == (409, "affect.revision_mismatch")
    assert body["error"]["details"] == {"id": "c1", "expected": 2, "actual": 3}
    back = error_from_wire("affect.revision_mismatch", "m", body["error"]["details"], 409)
    assert isinstance(back, RevisionMismatch)
    assert (back.id, back.expected, back.actual, back.message) == ("c1", 2, 3, "m")


def test_an_error_without_a_message_says_its_code() -> None:
    assert Forbidden().message == "forbidden"
    assert BifrostError().wire_code("memory") == "bifrost.internal"


def test_client_only_errors_are_never_rebuilt_from_a_response() -> None:
    assert (WrongBaseURL.code_suffix, WrongBaseURL.http_status) == ("wrong_base_url", 404)
    assert type(error_from_wire("bifrost.wrong_base_url", "m", {}, 404)) is BifrostError
    assert type(error_from_wire("bifrost.something_new", "m", {}, 418)) is BifrostError


def test_a_subclass_inherits_its_declaration_and_displaces_nothing() -> None:
    class StoreForbidden(Forbidden):
        """A store's own refusal: still ``bifrost.forbidden``."""

    class SecondForbidden(BifrostError, code="forbidden", status=403):
        """Declares a code already declared: the first class keeps it."""

    assert StoreForbidden("x").wire_code("memory") == "bifrost.forbidden"
    assert StoreForbidden.http_status == 403
    assert SecondForbidden("x").status == 403
    assert type(error_from_wire("bifrost.forbidden", "m", {}, 403)) is Forbidden
