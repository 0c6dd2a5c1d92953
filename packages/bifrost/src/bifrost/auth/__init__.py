"""Authentication on the wire: the per-dispatch JWT verifier, its claims, the
replay caches that keep a token single-use, and minting (for Heimdall stand-ins,
tests and the CLI)."""

from bifrost.auth.replay import InMemoryReplayCache, ReplayCache
from bifrost.auth.tokens import mint_token
from bifrost.auth.verifier import Claims, JwtVerifier, PendingToken

__all__ = [
    "Claims",
    "InMemoryReplayCache",
    "JwtVerifier",
    "PendingToken",
    "ReplayCache",
    "mint_token",
]
