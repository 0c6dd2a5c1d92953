"""A fast path for the common HS256 token, in front of PyJWT: it either returns the
payload PyJWT would return, or ``None`` — and then PyJWT decides, exactly as before.

PyJWT checks each base64url character in a Python generator and builds its key and
options per call: ≈ 0.2 ms of a small call's server CPU (docs/decisions.md). This
path keeps every check by *accepting less*: a token reaches it only in the one shape
PyJWT accepts without any judgement call, and everything else (another header,
padding, a bad signature, a claim PyJWT would refuse or read differently) goes to
PyJWT, which gives the verdict and the message it always gave. So a refusal is never
decided here, and an acceptance only where PyJWT's is certain:

- three non-empty segments of the base64url alphabet, no ``=``, each canonical (it
  re-encodes to itself, so no stray low bits): what PyJWT's segment check accepts;
- the header segment is one of :data:`HEADERS`, the exact encodings of
  ``{"alg":"HS256","typ":"JWT"}`` (either key order) and ``{"alg":"HS256"}``: no
  ``kid``, ``crit``, ``b64`` or other field PyJWT would judge;
- the signature is HMAC-SHA256 of ``header.payload`` under one of the keys, compared
  with :func:`hmac.compare_digest` (what PyJWT's HMAC algorithm does, keys tried in
  the verifier's order; only stdlib ``hmac``, no cryptography here);
- the payload is a JSON object that orjson reads as the standard library would
  (orjson refuses NaN, lone surrogates and non-UTF-8, which PyJWT's ``json.loads``
  may accept: those go to PyJWT; an integer beyond 64 bits, which orjson reads as a
  float, likewise), whose required claims are present and not null, whose ``iss``
  and ``aud`` equal the expected strings and whose ``sub`` and ``jti`` are strings:
  every claim check PyJWT makes with the verifier's options, passed.

Keys that PyJWT would refuse or warn about as HMAC secrets (PEM/SSH/DER-looking,
shorter than the digest) disable the fast path: their behaviour stays PyJWT's.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import warnings
from collections.abc import Sequence
from typing import Any

import orjson
from jwt.algorithms import HMACAlgorithm

from bifrost.jsoncodec import no_int64_overflow

__all__ = ["HEADERS", "FastHs256", "b64url"]


def b64url(data: bytes) -> str:
    """Unpadded base64url, as JWS writes segments."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


HEADERS = frozenset(
    b64url(h)
    for h in (b'{"alg":"HS256","typ":"JWT"}', b'{"typ":"JWT","alg":"HS256"}', b'{"alg":"HS256"}')
)
_MAX_CONTAINERS = 32
_COMPACT = re.compile(r"([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)")


def _segment(text: str) -> bytes | None:
    """The bytes of a canonical unpadded segment (alphabet already checked), else None."""
    if len(text) % 4 == 1:
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):  # pragma: no cover - alphabet checked before
        return None
    return raw if b64url(raw) == text else None


def _usable(key: bytes) -> bool:
    """Whether PyJWT takes ``key`` as an HS256 secret silently (no error, no warning)."""
    algorithm = HMACAlgorithm(HMACAlgorithm.SHA256)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            prepared = algorithm.prepare_key(key)
            return algorithm.check_key_length(prepared) is None
    except Exception:
        return False


class FastHs256:
    """The fast path for one verifier's keys, issuer, audience and required claims."""

    def __init__(
        self, keys: Sequence[bytes], *, issuer: str, audience: str, required: Sequence[str]
    ) -> None:
        self.enabled = bool(keys) and all(_usable(k) for k in keys)
        # Each key's HMAC state after the key block, copied per token.
        self._macs = tuple(hmac.new(k, digestmod=hashlib.sha256) for k in keys)
        self._issuer = issuer
        self._audience = audience
        self._required = tuple(required)

    def decode(self, token: str) -> tuple[int, dict[str, Any]] | None:
        """(index of the key that signed it, payload), or None: ask PyJWT."""
        if not self.enabled:
            return None
        match = _COMPACT.fullmatch(token)
        if match is None or match.group(1) not in HEADERS:
            return None
        payload_raw = _segment(match.group(2))
        signature = _segment(match.group(3))
        if payload_raw is None or signature is None:
            return None
        signing_input = token[: match.end(2)].encode("ascii")
        for index, mac in enumerate(self._macs):
            keyed = mac.copy()
            keyed.update(signing_input)
            if hmac.compare_digest(signature, keyed.digest()):
                payload = self._payload(payload_raw)
                return None if payload is None else (index, payload)
        return None

    def _payload(self, raw: bytes) -> dict[str, Any] | None:
        # The standard library's parser can run out of recursion before orjson's depth
        # limit: a payload nested beyond a few levels is PyJWT's to judge.
        if raw.count(b"{") + raw.count(b"[") > _MAX_CONTAINERS:
            return None
        try:
            payload = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(payload, dict) or not no_int64_overflow(payload):
            return None
        if any(payload.get(claim) is None for claim in self._required):
            return None
        iss, aud = payload.get("iss"), payload.get("aud")
        if not (isinstance(iss, str) and iss == self._issuer):
            return None
        if not (isinstance(aud, str) and aud == self._audience):
            return None
        if "sub" in payload and not isinstance(payload["sub"], str):
            return None
        if "jti" in payload and not isinstance(payload["jti"], str):
            return None
        return payload
