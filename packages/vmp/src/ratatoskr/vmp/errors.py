"""The VMP v0 error model: a wire ``code``, an HTTP status and a content-free message.

Stores raise these; the app renders them in one place as
``{"error": message, "code": code}``; the client raises them back from a
response. Messages never carry vectors, metadata or tags.

Each class is named for its wire code: ``InvalidArgument`` is VMP's
``INVALID_ARGUMENT`` (singular, ``shared/spec/vmp-plane.md``), as bifrost's
``InvalidArguments`` is the Bifrost wire's ``<plane>.invalid_arguments`` (plural,
``shared/spec/bifrost-wire.md``): two wires, two codes, so the two names stay.
The two hierarchies do not share a base class: this package does not depend on
``bifrost``.
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


_BY_WIRE: dict[tuple[str, int], type[_CodedError]] = {}
"""The class of each (code, status) pair the plane sends; one code may travel with
several statuses (INVALID_ARGUMENT: 400, 413, 415). Filled as the classes are declared."""


class _CodedError(VmpError):
    """An error whose code and status are its class's: a subclass declares them in its
    ``class`` line (``code=``, ``status=``; a subclass of a coded error inherits its
    code) and is registered for :func:`error_from_wire` unless it says
    ``on_wire=False`` (raised by the client only, never sent)."""

    CODE: ClassVar[str]
    STATUS: ClassVar[int]

    def __init_subclass__(
        cls,
        *,
        code: str | None = None,
        status: int | None = None,
        on_wire: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        if code is not None:
            cls.CODE = code
        if status is not None:
            cls.STATUS = status
        if on_wire and hasattr(cls, "CODE") and hasattr(cls, "STATUS"):
            _BY_WIRE.setdefault((cls.CODE, cls.STATUS), cls)

    def __init__(self, message: str) -> None:
        super().__init__(self.CODE, self.STATUS, message)


# The plane's errors, each declared once (shared/spec/vmp-plane.md, "Errors").
class InvalidArgument(_CodedError, code="INVALID_ARGUMENT", status=400):
    """Malformed JSON, a wrong type, an out-of-range value or a bad ``k`` (400)."""


class PayloadTooLarge(InvalidArgument, status=413):
    """A snapshot upload larger than the server accepts (413, code ``INVALID_ARGUMENT``)."""


class UnsupportedMediaType(InvalidArgument, status=415):
    """A request body of the wrong ``Content-Type`` (415, code ``INVALID_ARGUMENT``).

    JSON routes take only ``application/json``, the snapshot upload only
    ``application/octet-stream``: neither can be sent cross-site by a browser
    without a CORS preflight, which the plane never grants.
    """


class DimMismatch(_CodedError, code="DIM_MISMATCH", status=400):
    """A vector whose length is not the store's dimension (400)."""


class NotFound(_CodedError, code="NOT_FOUND", status=404):
    """An unknown document node or metadata target (404)."""


class CapacityExceeded(_CodedError, code="CAPACITY_EXCEEDED", status=507):
    """The store is full: the record limit or the disk (507)."""


class InternalError(_CodedError, code="INTERNAL_ERROR", status=500):
    """Anything else (500)."""


class Unauthenticated(_CodedError, code="UNAUTHENTICATED", status=401, on_wire=False):
    """Client side only: the server answered 401 (missing or wrong API key).

    The server sends 401 with an empty body, so this code never travels on the wire.
    """


class Unavailable(_CodedError, code="UNAVAILABLE", status=0, on_wire=False):
    """Client side only: the server could not be reached (``status`` 0: no HTTP answer)."""


def error_from_wire(code: str, status: int, message: str) -> VmpError:
    """The typed error for a wire ``code`` and HTTP ``status``; a plain VmpError when
    the pair is not one the plane sends."""
    cls = _BY_WIRE.get((code, status))
    if cls is not None:
        return cls(message)
    return VmpError(code, status, message)
