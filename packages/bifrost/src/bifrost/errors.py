"""The typed error hierarchy of the Bifrost wire and its single rendering.

Errors are data: each class declares its wire code suffix and HTTP status once,
in its ``class`` line, and is registered for :func:`error_from_wire` there.
Codes of plane-specific failures are prefixed with the plane of the dispatch
(``memory.invalid_arguments``); the others with ``bifrost``. Messages and
details never carry content, embeddings, scope values or token material: the
validators in this package say *which* input failed (by index or field name),
never *what* it held.
"""

from __future__ import annotations

import logging
import re
from typing import Any, ClassVar

__all__ = [
    "BifrostError",
    "Forbidden",
    "IdempotencyConflict",
    "InsufficientStorage",
    "Internal",
    "InvalidArguments",
    "InvalidFilter",
    "MalformedEnvelope",
    "PayloadTooLarge",
    "QuotaExceeded",
    "RevisionMismatch",
    "Unauthenticated",
    "Unavailable",
    "UnknownVerb",
    "UnsupportedVerb",
    "UnsupportedWireVersion",
    "error_body",
    "error_from_wire",
    "loggable_id",
    "render_error",
]

_log = logging.getLogger("bifrost.errors")
_PLAIN_ID = re.compile(r"[A-Za-z0-9._:@/+-]{1,256}")


def loggable_id(value: str | None) -> str | None:
    """A client-chosen id (``call_id``) as it may go into a log line: as is when it is
    a plain token (uuids, ulids, …), else its ``repr`` — quoted, with newlines and
    control characters escaped — so a caller cannot forge or split log lines."""
    if value is None or _PLAIN_ID.fullmatch(value):
        return value
    return repr(value)


_BY_SUFFIX: dict[str, type[BifrostError]] = {}
"""The error class of each wire code suffix, filled as the classes are declared."""


class BifrostError(Exception):
    """Base of every error the wire knows.

    ``code_suffix`` and ``http_status`` are class attributes; ``plane_prefixed``
    says whether the wire code takes the dispatch's plane as prefix. A subclass
    declares them in its ``class`` line (``code=``, ``status=``, ``plane=``) and
    is then the class :func:`error_from_wire` rebuilds for that code, unless it
    says ``on_wire=False`` (an error only a client raises).
    """

    code_suffix: ClassVar[str] = "internal"
    http_status: ClassVar[int] = 500
    plane_prefixed: ClassVar[bool] = False

    def __init_subclass__(
        cls,
        *,
        code: str | None = None,
        status: int | None = None,
        plane: bool | None = None,
        on_wire: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        if code is not None:
            cls.code_suffix = code
        if status is not None:
            cls.http_status = status
        if plane is not None:
            cls.plane_prefixed = plane
        if code is not None and on_wire:
            _BY_SUFFIX.setdefault(code, cls)

    def __init__(self, message: str = "", details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message: str = message or self.code_suffix.replace("_", " ")
        self.details: dict[str, Any] = dict(details or {})
        # Set when the error was reconstructed from a wire response (client side).
        self.received_code: str | None = None
        self.received_status: int | None = None

    def wire_code(self, plane: str | None = None) -> str:
        """The wire code: ``<plane>.<suffix>`` for plane errors, else ``bifrost.<suffix>``.

        An error reconstructed from a response keeps the code it arrived with.
        """
        if self.received_code is not None:
            return self.received_code
        if self.plane_prefixed and plane:
            return f"{plane}.{self.code_suffix}"
        return f"bifrost.{self.code_suffix}"

    @property
    def status(self) -> int:
        return self.received_status if self.received_status is not None else self.http_status

    def __str__(self) -> str:
        return self.message


# The wire's errors, each declared once: code suffix, HTTP status, plane prefix.
class MalformedEnvelope(BifrostError, code="malformed_envelope", status=400):
    """The body is not a well-formed v0.6 envelope."""


class UnsupportedWireVersion(BifrostError, code="unsupported_wire_version", status=400):
    """The envelope names a wire version this library does not speak."""


class UnknownVerb(BifrostError, code="unknown_verb", status=400):
    """No verb of that name on this plane (or route)."""


class Unauthenticated(BifrostError, code="unauthenticated", status=401):
    """The token failed a check; the message names which, never the token."""


class Forbidden(BifrostError, code="forbidden", status=403):
    """The call reaches outside the token's scope grant."""


class PayloadTooLarge(BifrostError, code="payload_too_large", status=413):
    """The body is larger than the consumer accepts."""


class UnsupportedVerb(BifrostError, code="unsupported_verb", status=501, plane=True):
    """A verb the wire names that this consumer does not implement."""


class InvalidArguments(BifrostError, code="invalid_arguments", status=400, plane=True):
    """An argument or record the plane's validation refused (``<plane>.invalid_arguments``:
    the wire code is plural, hence the name; VMP's ``InvalidArgument`` mirrors its own
    ``INVALID_ARGUMENT``)."""


class InvalidFilter(BifrostError, code="invalid_filter", status=400, plane=True):
    """A scope or metadata filter the plane cannot apply."""


class IdempotencyConflict(BifrostError, code="idempotency_conflict", status=409, plane=True):
    """An idempotency key reused with a different request."""


class RevisionMismatch(BifrostError, code="revision_mismatch", status=409, plane=True):
    """An expected revision did not hold; details name the id and both revisions."""

    def __init__(self, id: str, expected: int, actual: int) -> None:
        super().__init__(
            f"revision mismatch: expected {expected}, actual {actual}",
            {"id": id, "expected": expected, "actual": actual},
        )
        self.id = id
        self.expected = expected
        self.actual = actual


class QuotaExceeded(BifrostError, code="quota_exceeded", status=413, plane=True):
    """The write would take a tenant past its quota (records or stored bytes); the
    message names the setting, never the tenant. Nothing was written; the same call
    succeeds once the tenant's deletes make room (or the quota is raised). 413, not
    429 (waiting frees nothing, and clients retry a 429 by themselves) nor 403 (the
    token is fine) nor 507 (the server's disk is not full)."""


class InsufficientStorage(BifrostError, code="insufficient_storage", status=507):
    """The consumer's storage is full (or below the space it keeps back for deletes):
    nothing was written; reads and deletes go on, and the same call may be retried once
    space returns."""


class Unavailable(BifrostError, code="unavailable", status=503):
    """The consumer's storage cannot be reached right now (a database server gone, a
    failover under way, no free connection in time): a write answered so may or may
    not have committed, and the same call retried with the same idempotency key
    applies it once or replays it."""


class Internal(BifrostError, code="internal", status=500):
    """Anything else; its message is generic."""


def _declared(exc: BaseException) -> BifrostError | None:
    """The wire error an exception of a library below the planes says it is: its class
    names a code suffix in ``bifrost_code`` (ratatoskr's ``StorageFull`` names
    ``insufficient_storage``) and keeps its message content-free. Only the server
    conditions a store can meet are honoured (507, 503), never a client error."""
    cls = _BY_SUFFIX.get(str(getattr(type(exc), "bifrost_code", "")))
    if cls is not InsufficientStorage and cls is not Unavailable:
        return None
    return cls(str(exc) or "")


def error_body(
    code: str, message: str, details: dict[str, Any], call_id: str | None
) -> dict[str, Any]:
    return {
        "ok": False,
        "call_id": call_id,
        "error": {"code": code, "message": message, "details": details},
    }


def render_error(
    exc: BaseException, *, plane: str | None, call_id: str | None
) -> tuple[int, dict[str, Any]]:
    """Render any exception as ``(http_status, response_body)``.

    The one place errors become wire responses. A non-Bifrost exception becomes
    ``bifrost.internal`` with a generic message (or the error it declares, for storage
    failures the wire names); it is logged with the call id and the exception's type
    name only, never its text (which might hold content).
    """
    if not isinstance(exc, BifrostError):
        declared = _declared(exc)
        if declared is not None:
            # A storage failure the wire names (503 unavailable, 507 full): the operator
            # still needs a line saying which, with the type name only.
            _log.warning(
                "storage error call_id=%s type=%s code=%s",
                loggable_id(call_id),
                type(exc).__name__,
                declared.wire_code(plane),
            )
            exc = declared
    if isinstance(exc, BifrostError):
        return exc.status, error_body(exc.wire_code(plane), exc.message, exc.details, call_id)
    _log.error("internal error call_id=%s type=%s", loggable_id(call_id), type(exc).__name__)
    return 500, error_body("bifrost.internal", "internal error", {}, call_id)


def error_from_wire(
    code: str, message: str, details: dict[str, Any] | None, status: int | None = None
) -> BifrostError:
    """Rebuild the typed error a response carried (client side).

    The returned error keeps the exact wire code (``wire_code()`` returns it)
    and the HTTP status; unknown codes give a plain ``BifrostError``.
    """
    details = dict(details or {})
    cls = _BY_SUFFIX.get(code.rsplit(".", 1)[-1], BifrostError)
    err: BifrostError
    if cls is RevisionMismatch:
        rm = RevisionMismatch(
            str(details.get("id", "")),
            _as_int(details.get("expected")),
            _as_int(details.get("actual")),
        )
        rm.message = message
        err = rm
    else:
        err = cls(message, details)
    err.details = details
    err.received_code = code
    err.received_status = status
    return err


def _as_int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else -1
