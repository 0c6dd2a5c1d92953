"""The verifier's historical home (the seed contract names
``bifrost.reference_server.JwtVerifier``): re-exports of :mod:`bifrost.auth`,
where authentication lives."""

from bifrost.auth import Claims, InMemoryTokenCache, JwtVerifier, TokenCache, mint_token

__all__ = ["Claims", "InMemoryTokenCache", "JwtVerifier", "TokenCache", "mint_token"]
