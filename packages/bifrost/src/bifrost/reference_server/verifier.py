"""``JwtVerifier``: checks the per-dispatch Heimdall token (HS256 via PyJWT).

Every failure raises ``Unauthenticated`` whose message names the check that
failed ("token expired", "token replayed", …) and never echoes the token or
any claim value.

Replay cache policy: a ``jti`` is remembered until its token could no longer
be accepted (``exp + leeway``). The cache holds at most ``replay_cache_size``
entries; expired entries are dropped on every insert, and when it is still
full the entry that expires soonest is evicted (its token is the closest to
becoming unacceptable anyway). With the defaults (100 000 entries, 300 s
maximum lifetime) eviction of a still-valid entry needs a sustained rate
above ~330 dispatches per second.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jwt

from bifrost.context import DispatchContext
from bifrost.errors import InvalidArguments, Unauthenticated
from bifrost.scope import validate_record_scope

__all__ = ["PLANES", "Claims", "JwtVerifier", "ReplayCache"]

PLANES = ("memory", "affect")
_REQUIRED = ["iss", "aud", "sub", "iat", "exp", "jti", "bifrost"]
MAX_JTI_CHARS = 256


@dataclass(frozen=True)
class Claims:
    """The verified identity of one dispatch."""

    actor: str
    scope: dict[str, str]
    plane: str
    verb: str
    token_id: str
    consumer_id: str
    issued_at: float
    expires_at: float
    extra: dict[str, Any] = field(default_factory=dict)

    def context(self, call_id: str | None) -> DispatchContext:
        return DispatchContext(
            actor=self.actor,
            scope=dict(self.scope),
            call_id=call_id,
            plane=self.plane,
            verb=self.verb,
            consumer_id=self.consumer_id,
            token_id=self.token_id,
        )


class ReplayCache:
    """Bounded, thread-safe set of seen ``jti`` values with expiry (see module doc)."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("replay_cache_size must be positive")
        self.size = size
        self._lock = threading.Lock()
        self._expiry: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return len(self._expiry)

    def check_and_add(self, jti: str, expires_at: float, now: float) -> bool:
        """Remember ``jti``; False if it is already remembered (a replay)."""
        with self._lock:
            while self._heap and self._heap[0][0] <= now:
                _, old = heapq.heappop(self._heap)
                self._expiry.pop(old, None)
            if jti in self._expiry:
                return False
            while len(self._expiry) >= self.size:
                _, old = heapq.heappop(self._heap)
                self._expiry.pop(old, None)
            self._expiry[jti] = expires_at
            heapq.heappush(self._heap, (expires_at, jti))
            return True


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        f = float(value)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


class JwtVerifier:
    """Verifies one Heimdall token against one request.

    ``key`` is the shared HS256 secret (non-empty bytes); ``clock`` returns
    seconds since the epoch (injectable for tests).
    """

    def __init__(
        self,
        key: bytes,
        *,
        issuer: str = "heimdall",
        audience: str = "ratatoskr",
        max_lifetime_s: float = 300,
        leeway_s: float = 30,
        replay_cache_size: int = 100_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(key, bytes | bytearray):
            raise TypeError("key must be bytes")
        if not key:
            raise ValueError("key must be non-empty")
        if max_lifetime_s <= 0 or leeway_s < 0:
            raise ValueError("max_lifetime_s must be positive and leeway_s non-negative")
        self._key = bytes(key)
        self.issuer = issuer
        self.audience = audience
        self.max_lifetime_s = max_lifetime_s
        self.leeway_s = leeway_s
        self._clock = clock
        self.replay_cache = ReplayCache(replay_cache_size)

    def __repr__(self) -> str:  # never show the key
        return f"JwtVerifier(issuer={self.issuer!r}, audience={self.audience!r})"

    def verify(self, token: str, *, body: bytes, plane: str, verb: str | None) -> Claims:
        """Verify ``token`` for this exact ``body`` on ``plane`` and ``verb``.

        ``verb=None`` skips only the verb binding (the caller must then compare
        ``Claims.verb`` itself — the app does, after parsing the envelope).
        Raises ``Unauthenticated``.
        """
        payload = self._decode(token)
        now = self._clock()
        iat, exp = _number(payload["iat"]), _number(payload["exp"])
        if iat is None or exp is None:
            raise Unauthenticated("token iat/exp must be numbers")
        if now > exp + self.leeway_s:
            raise Unauthenticated("token expired")
        if iat > now + self.leeway_s:
            raise Unauthenticated("token issued in the future")
        if "nbf" in payload:
            nbf = _number(payload["nbf"])
            if nbf is None:
                raise Unauthenticated("token nbf must be a number")
            if nbf > now + self.leeway_s:
                raise Unauthenticated("token not yet valid")
        if exp <= iat:
            raise Unauthenticated("token lifetime is not positive")
        if exp - iat > self.max_lifetime_s:
            raise Unauthenticated("token lifetime exceeds the maximum")
        sub, jti = payload["sub"], payload["jti"]
        if not isinstance(sub, str) or not sub:
            raise Unauthenticated("token sub must be a non-empty string")
        if not isinstance(jti, str) or not 1 <= len(jti) <= MAX_JTI_CHARS:
            raise Unauthenticated("token jti must be a string of 1..256 characters")
        claims = self._bifrost_claim(payload, body=body, plane=plane, verb=verb)
        if not self.replay_cache.check_and_add(jti, exp + self.leeway_s, now):
            raise Unauthenticated("token replayed")
        return Claims(
            actor=sub,
            scope=claims[1],
            plane=plane,
            verb=claims[0],
            token_id=jti,
            consumer_id=self.audience,
            issued_at=iat,
            expires_at=exp,
        )

    def _decode(self, token: object) -> dict[str, Any]:
        if not isinstance(token, str) or not token:
            raise Unauthenticated("token missing")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise Unauthenticated("token malformed") from None
        if header.get("alg") != "HS256":
            raise Unauthenticated("token algorithm not allowed (HS256 only)")
        try:
            payload: dict[str, Any] = jwt.decode(
                token,
                self._key,
                algorithms=["HS256"],
                audience=self.audience,
                issuer=self.issuer,
                options={
                    "require": _REQUIRED,
                    "verify_signature": True,
                    "verify_aud": True,
                    "verify_iss": True,
                    # Time claims are checked by hand against the injectable clock.
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                },
            )
        except jwt.MissingRequiredClaimError as exc:
            raise Unauthenticated(f"token missing claim {exc.claim}") from None
        except jwt.InvalidSignatureError:
            raise Unauthenticated("token signature invalid") from None
        except jwt.InvalidAudienceError:
            raise Unauthenticated("token audience mismatch") from None
        except jwt.InvalidIssuerError:
            raise Unauthenticated("token issuer mismatch") from None
        except jwt.InvalidAlgorithmError:
            raise Unauthenticated("token algorithm not allowed (HS256 only)") from None
        except jwt.DecodeError:
            raise Unauthenticated("token malformed") from None
        except jwt.InvalidTokenError:
            raise Unauthenticated("token invalid") from None
        return payload

    def _bifrost_claim(
        self, payload: dict[str, Any], *, body: bytes, plane: str, verb: str | None
    ) -> tuple[str, dict[str, str]]:
        claim = payload["bifrost"]
        if not isinstance(claim, dict):
            raise Unauthenticated("token bifrost claim must be an object")
        if claim.get("plane") != plane:
            raise Unauthenticated("token minted for another plane")
        token_verb = claim.get("verb")
        if not isinstance(token_verb, str) or not token_verb:
            raise Unauthenticated("token bifrost.verb missing")
        if verb is not None and token_verb != verb:
            raise Unauthenticated("token minted for another verb")
        digest = claim.get("body_sha256")
        if not isinstance(digest, str):
            raise Unauthenticated("token bifrost.body_sha256 missing")
        actual = hashlib.sha256(body).hexdigest()
        if not hmac.compare_digest(digest.lower().encode("utf-8"), actual.encode("ascii")):
            raise Unauthenticated("token not minted for this body")
        if "scope" not in claim:
            raise Unauthenticated("token bifrost.scope missing")
        try:
            scope = validate_record_scope(claim["scope"], "token scope grant")
        except InvalidArguments:
            raise Unauthenticated("token scope grant malformed") from None
        return token_verb, scope
