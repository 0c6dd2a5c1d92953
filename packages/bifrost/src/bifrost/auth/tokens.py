"""``mint_token``: the per-dispatch token a Heimdall stand-in, a test or the CLI
signs (the verifier's counterpart; see :mod:`bifrost.auth.verifier`)."""

from __future__ import annotations

import hashlib
import time
import uuid

import jwt

from bifrost.context import DEFAULT_CONSUMER_ID

__all__ = ["mint_token"]


def mint_token(
    key: bytes,
    *,
    plane: str,
    verb: str,
    body: bytes,
    actor: str,
    scope: dict[str, str] | None = None,
    issuer: str = "heimdall",
    audience: str = DEFAULT_CONSUMER_ID,
    lifetime_s: float = 60,
    now: float | None = None,
    jti: str | None = None,
) -> str:
    """An HS256 per-dispatch token bound to ``body``, ``plane`` and ``verb``."""
    iat = int(time.time() if now is None else now)
    claims = {
        "iss": issuer,
        "aud": audience,
        "sub": actor,
        "iat": iat,
        "exp": iat + int(lifetime_s),
        "jti": jti or str(uuid.uuid4()),
        "bifrost": {
            "plane": plane,
            "verb": verb,
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "scope": dict(scope or {}),
        },
    }
    return jwt.encode(claims, key, algorithm="HS256")
