"""Authentication on the wire: the per-dispatch JWT verifier, its claims, the
token caches that keep a token single-use, and minting (for Heimdall stand-ins,
tests and the CLI)."""

from bifrost.auth.token_cache import InMemoryTokenCache, TokenCache
from bifrost.auth.tokens import mint_token
from bifrost.auth.verifier import Claims, JwtVerifier, PendingToken

__all__ = [
    "Claims",
    "InMemoryTokenCache",
    "JwtVerifier",
    "PendingToken",
    "TokenCache",
    "mint_token",
]
