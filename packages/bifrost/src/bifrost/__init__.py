"""Bifrost wire v0.6: envelope, per-dispatch JWT, scope grants, typed errors,
plane apps, reference stores and a conformance kit. See README.md.

The typed errors and ``render_error`` are :mod:`bifrost.errors`' own list, without
the helpers the plane apps and the client use (they stay in ``bifrost.errors``)."""

from bifrost import errors
from bifrost.context import DispatchContext
from bifrost.envelope import WIRE_VERSION, Envelope, parse_envelope
from bifrost.errors import *  # noqa: F403  (its __all__, re-exported below)
from bifrost.scope import SCOPE_LATTICE

__version__ = "0.8.0"

__all__ = [
    "SCOPE_LATTICE",
    "WIRE_VERSION",
    "DispatchContext",
    "Envelope",
    "__version__",
    "parse_envelope",
]
__all__ += errors.__all__
__all__.remove("error_body")
__all__.remove("error_from_wire")
__all__.remove("loggable_id")
