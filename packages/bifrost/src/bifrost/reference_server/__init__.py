"""The verifier's historical home (the seed contract names
``bifrost.reference_server.JwtVerifier``): re-exports of :mod:`bifrost.auth`."""

from bifrost.auth import PLANES, Claims, InMemoryReplayCache, JwtVerifier, ReplayCache

__all__ = ["PLANES", "Claims", "InMemoryReplayCache", "JwtVerifier", "ReplayCache"]
