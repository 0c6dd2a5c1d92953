"""``JwtVerifier``: checks the per-dispatch Heimdall token (HS256 via PyJWT).

Every failure raises ``Unauthenticated`` whose message names the check that
failed ("token expired", "token replayed", …) and never echoes the token or
any claim value.

Order of work (``shared/spec/bifrost-wire.md``): :meth:`JwtVerifier.check_headers`
checks everything the ``Authorization`` header alone can prove — signature,
algorithm, issuer, audience, times, lifetime, ``sub``, ``jti``, the plane and
the grant, and that the ``jti`` has not been seen — so an unauthenticated or
replayed caller never makes the server buffer a body. Once the body is in,
:meth:`JwtVerifier.admit` compares ``body_sha256`` and only then remembers the
``jti`` (atomically, in a :class:`~bifrost.auth.token_cache.TokenCache` every
process of the deployment shares): a token sent with the wrong body is refused
without being used up. :meth:`JwtVerifier.verify` does both at once.

A ``jti`` is remembered until its token could no longer be accepted
(``exp + leeway``).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jwt

from bifrost.auth.fastjws import FastHs256
from bifrost.auth.token_cache import InMemoryTokenCache, TokenCache
from bifrost.context import DEFAULT_CONSUMER_ID, DispatchContext
from bifrost.errors import InvalidArguments, Unauthenticated
from bifrost.scope import validate_record_scope

__all__ = ["Claims", "JwtVerifier", "PendingToken"]

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


class _SignatureMismatch(Exception):
    """The signature does not match the key tried (another key may)."""


@dataclass(frozen=True)
class PendingToken:
    """A token whose header checks passed; its body binding is still to be checked."""

    claims: Claims
    body_sha256: str
    remember_until: float


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

    ``key`` is the shared HS256 secret (non-empty bytes); ``previous_keys`` are
    keys still accepted while Heimdall moves to ``key`` (a rotation without
    downtime: see the provider's README); ``token_cache`` is
    where accepted ``jti`` values are remembered (default: an
    :class:`InMemoryTokenCache` of ``token_cache_size`` entries, one process
    only); ``clock`` returns seconds since the epoch (injectable for tests);
    ``fast_path=False`` sends every token through PyJWT (the fast path in
    :mod:`bifrost.auth.fastjws` gives the same verdicts; tests compare the two).
    """

    def __init__(
        self,
        key: bytes,
        *,
        issuer: str = "heimdall",
        audience: str = DEFAULT_CONSUMER_ID,
        max_lifetime_s: float = 300,
        leeway_s: float = 30,
        token_cache_size: int = 100_000,
        token_cache: TokenCache | None = None,
        previous_keys: Sequence[bytes] = (),
        clock: Callable[[], float] = time.time,
        fast_path: bool = True,
    ) -> None:
        if not isinstance(key, bytes | bytearray):
            raise TypeError("key must be bytes")
        if not key:
            raise ValueError("key must be non-empty")
        if max_lifetime_s <= 0 or leeway_s < 0:
            raise ValueError("max_lifetime_s must be positive and leeway_s non-negative")
        if token_cache is not None and not isinstance(token_cache, TokenCache):
            raise TypeError("token_cache must have check_and_add() and seen()")
        if any(not isinstance(k, bytes | bytearray) or not k for k in previous_keys):
            raise ValueError("previous_keys must be non-empty bytes")
        # The current key first: during a rotation only tokens still signed with a
        # previous key pay for a second signature check.
        self._keys = (bytes(key), *(bytes(k) for k in previous_keys))
        self.issuer = issuer
        self.audience = audience
        self.max_lifetime_s = max_lifetime_s
        self.leeway_s = leeway_s
        self._clock = clock
        self._fast = FastHs256(
            self._keys if fast_path else (),
            issuer=issuer,
            audience=audience,
            required=_REQUIRED,
        )
        self.token_cache: TokenCache = (
            token_cache if token_cache is not None else InMemoryTokenCache(token_cache_size)
        )

    def __repr__(self) -> str:  # never show the key
        return f"JwtVerifier(issuer={self.issuer!r}, audience={self.audience!r})"

    def verify(self, token: str, *, body: bytes, plane: str, verb: str | None) -> Claims:
        """Verify ``token`` for this exact ``body`` on ``plane`` and ``verb``.

        ``verb=None`` skips only the verb binding (the caller must then compare
        ``Claims.verb`` itself — the app does, after parsing the envelope).
        Raises ``Unauthenticated``.
        """
        pending = self.check_headers(token, plane=plane)
        if verb is not None and pending.claims.verb != verb:
            raise Unauthenticated("token minted for another verb")
        return self.admit(pending, body)

    def check_headers(self, token: str, *, plane: str) -> PendingToken:
        """Every check that needs only the token: signature and claims, the plane,
        and that the ``jti`` has not been used. Raises ``Unauthenticated``."""
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
        verb, digest, scope = self._bifrost_claim(payload, plane=plane)
        if self.token_cache.seen(jti, now):
            raise Unauthenticated("token replayed")
        claims = Claims(
            actor=sub,
            scope=scope,
            plane=plane,
            verb=verb,
            token_id=jti,
            consumer_id=self.audience,
            issued_at=iat,
            expires_at=exp,
        )
        return PendingToken(claims, digest.lower(), exp + self.leeway_s)

    def admit(self, pending: PendingToken, body: bytes) -> Claims:
        """The token's claims once ``body`` is the one it was minted for; its
        ``jti`` is remembered from here on. Raises ``Unauthenticated``."""
        actual = hashlib.sha256(body).hexdigest()
        if not hmac.compare_digest(pending.body_sha256.encode("utf-8"), actual.encode("ascii")):
            raise Unauthenticated("token not minted for this body")
        if not self.token_cache.check_and_add(
            pending.claims.token_id, pending.remember_until, self._clock()
        ):
            raise Unauthenticated("token replayed")
        return pending.claims

    def _decode(self, token: object) -> dict[str, Any]:
        if not isinstance(token, str) or not token:
            raise Unauthenticated("token missing")
        fast = self._fast.decode(token)
        if fast is not None:  # the verdict PyJWT would give (auth/fastjws.py)
            return fast[1]
        for i, key in enumerate(self._keys):
            try:
                decoded = self._decode_with(token, key)
                break
            except _SignatureMismatch:
                if i + 1 == len(self._keys):
                    raise Unauthenticated("token signature invalid") from None
        if decoded["header"].get("alg") != "HS256":
            raise Unauthenticated("token algorithm not allowed (HS256 only)")
        payload: dict[str, Any] = decoded["payload"]
        # PyJWT accepts a list that merely contains the audience; a token minted for
        # several consumers would be good at each of them, so only the exact id passes.
        if payload["aud"] != self.audience:
            raise Unauthenticated("token audience mismatch")
        return payload

    def _decode_with(self, token: str, key: bytes) -> dict[str, Any]:
        """One PyJWT decode with ``key``; a signature that does not match raises
        ``_SignatureMismatch`` (another key may fit), every other failure
        ``Unauthenticated``."""
        try:
            return jwt.decode_complete(
                token,
                key,
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
            raise _SignatureMismatch from None
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

    def _bifrost_claim(
        self, payload: dict[str, Any], *, plane: str
    ) -> tuple[str, str, dict[str, str]]:
        claim = payload["bifrost"]
        if not isinstance(claim, dict):
            raise Unauthenticated("token bifrost claim must be an object")
        if claim.get("plane") != plane:
            raise Unauthenticated("token minted for another plane")
        token_verb = claim.get("verb")
        if not isinstance(token_verb, str) or not token_verb:
            raise Unauthenticated("token bifrost.verb missing")
        digest = claim.get("body_sha256")
        if not isinstance(digest, str):
            raise Unauthenticated("token bifrost.body_sha256 missing")
        if "scope" not in claim:
            raise Unauthenticated("token bifrost.scope missing")
        try:
            scope = validate_record_scope(claim["scope"], "token scope grant")
        except InvalidArguments:
            raise Unauthenticated("token scope grant malformed") from None
        return token_verb, digest, scope
