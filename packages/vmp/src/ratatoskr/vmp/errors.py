"""The VMP v0 error model: a wire ``code``, an HTTP status and a content-free message.

Stores raise these; the app renders them in one place as
``{"error": message, "code": code}``; the client raises them back from a
response. Messages never carry vectors, metadata or tags.
"""

from __future__ import annotations

from typing import Any, ClassVar


class VmpError(Exception):
    """A VMP error: ``code`` (e.g. ``"NOT_FOUND"``), HTTP ``status`` and ``message``."""

    def __init__(self, code: str, status: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message

    def to_body(self) -> dict[str, Any]:
        """The JSON body the wire carries for this error."""
        return {"error": self.message, "code": self.code}

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(code={self.code!r}, status={self.status}, message={self.message!r})"


class _CodedError(VmpError):
    CODE: ClassVar[str]
    STATUS: ClassVar[int]

    def __init__(self, message: str) -> None:
        super().__init__(self.CODE, self.STATUS, message)


class InvalidArgument(_CodedError):
    """Malformed JSON, a wrong type, an out-of-range value or a bad ``k`` (400)."""

    CODE = "INVALID_ARGUMENT"
    STATUS = 400


class PayloadTooLarge(InvalidArgument):
    """A snapshot upload larger than the server accepts (413, code ``INVALID_ARGUMENT``)."""

    STATUS = 413


class UnsupportedMediaType(InvalidArgument):
    """A request body of the wrong ``Content-Type`` (415, code ``INVALID_ARGUMENT``).

    JSON routes take only ``application/json``, the snapshot upload only
    ``application/octet-stream``: neither can be sent cross-site by a browser
    without a CORS preflight, which the plane never grants.
    """

    STATUS = 415


class DimMismatch(_CodedError):
    """A vector whose length is not the store's dimension (400)."""

    CODE = "DIM_MISMATCH"
    STATUS = 400


class NotFound(_CodedError):
    """An unknown document node or metadata target (404)."""

    CODE = "NOT_FOUND"
    STATUS = 404


class CapacityExceeded(_CodedError):
    """The store is full: the record limit or the disk (507)."""

    CODE = "CAPACITY_EXCEEDED"
    STATUS = 507


class InternalError(_CodedError):
    """Anything else (500)."""

    CODE = "INTERNAL_ERROR"
    STATUS = 500


class Unauthenticated(_CodedError):
    """Client side only: the server answered 401 (missing or wrong API key).

    The server sends 401 with an empty body, so this code never travels on the wire.
    """

    CODE = "UNAUTHENTICATED"
    STATUS = 401


class Unavailable(_CodedError):
    """Client side only: the server could not be reached (``status`` 0: no HTTP answer)."""

    CODE = "UNAVAILABLE"
    STATUS = 0


# One code may travel with several statuses (INVALID_ARGUMENT: 400, 413, 415).
_BY_WIRE: dict[tuple[str, int], type[_CodedError]] = {
    (cls.CODE, cls.STATUS): cls
    for cls in (
        InvalidArgument,
        PayloadTooLarge,
        UnsupportedMediaType,
        DimMismatch,
        NotFound,
        CapacityExceeded,
        InternalError,
    )
}


def error_from_wire(code: str, status: int, message: str) -> VmpError:
    """The typed error for a wire ``code`` and HTTP ``status``; a plain VmpError when
    the pair is not one the plane sends."""
    cls = _BY_WIRE.get((code, status))
    if cls is not None:
        return cls(message)
    return VmpError(code, status, message)
