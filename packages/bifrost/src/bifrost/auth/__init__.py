"""Authentication on the wire: the per-dispatch JWT verifier, its claims, the
replay caches that keep a token single-use, and minting (for Heimdall stand-ins,
tests and the CLI)."""

from bifrost.auth.replay import InMemoryReplayCache, ReplayCache
from bifrost.auth.verifier import PLANES, Claims, JwtVerifier, PendingToken

__all__ = ["PLANES", "Claims", "InMemoryReplayCache", "JwtVerifier", "PendingToken", "ReplayCache"]
