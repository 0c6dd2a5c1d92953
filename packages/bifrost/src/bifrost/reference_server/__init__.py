"""The seed contract's import path for the verifier,
``bifrost.reference_server.JwtVerifier``; it lives in :mod:`bifrost.auth`."""

from bifrost.auth import JwtVerifier

__all__ = ["JwtVerifier"]
