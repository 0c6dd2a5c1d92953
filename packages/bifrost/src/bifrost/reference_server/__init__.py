"""Server-side pieces of the reference consumer: the per-dispatch JWT verifier."""

from bifrost.reference_server.verifier import PLANES, Claims, JwtVerifier, ReplayCache

__all__ = ["PLANES", "Claims", "JwtVerifier", "ReplayCache"]
