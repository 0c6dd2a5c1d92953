"""Tools of the hostile-input tests: forged tokens, raw posts, nasty strings, and a
tally of what was tried and what came back (for docs/reliability.md)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import uuid
from collections import Counter
from typing import Any

import httpx
import jwt

from bifrost.consumer.testing.helpers import envelope_bytes

from ..conftest import KEY

DROP = object()  # a claim override that removes the claim

# Strings that break naive SQL, JSON, C strings, URLs, logs, terminals or sorting.
NASTY = [
    "'",
    '"',
    "\\",
    "'; DROP TABLE memory_chunks; --",
    '" OR 1=1 --',
    "%",
    "_",
    "a\x00b",
    "a\x00c",
    "\x00",
    "🦊",
    "e\u0301",
    "\u202eevil",
    "\ufeffbom",
    "\U0010ffff",
    "line\nbreak\r\n",
    "<script>alert(1)</script>",
    "${jndi:ldap://x/a}",
    "../../etc/passwd",
    "é" * 256,  # exactly 512 bytes of UTF-8: the longest id allowed
]


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def claims(
    body: bytes,
    verb: str,
    *,
    plane: str = "memory",
    scope: dict[str, str] | None = None,
    inner: dict[str, Any] | None = None,
    **over: Any,
) -> dict[str, Any]:
    now = int(time.time())
    grant = {"tenant": "mallory"} if scope is None else scope
    out: dict[str, Any] = {
        "iss": "heimdall",
        "aud": "ratatoskr",
        "sub": "mallory",
        "iat": now,
        "exp": now + 60,
        "jti": str(uuid.uuid4()),
        "bifrost": {
            "plane": plane,
            "verb": verb,
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "scope": grant,
        },
    }
    for name, value in (inner or {}).items():
        if value is DROP:
            out["bifrost"].pop(name, None)
        else:
            out["bifrost"][name] = value
    for name, value in over.items():
        if value is DROP:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def sign(payload: Any, *, alg: str = "HS256", key: bytes = KEY.encode(), **header: Any) -> str:
    """A JWT with any header and payload. HS* are signed by PyJWT; any other ``alg``
    gets a well-formed token with an HS256 signature under that header (the server
    must refuse it before looking at the signature)."""
    if alg in ("HS256", "HS384", "HS512") and isinstance(payload, dict) and key:
        return jwt.encode(payload, key, algorithm=alg, headers=header or None)
    head = b64(json.dumps({"alg": alg, "typ": "JWT", **header}).encode())
    body = b64(payload if isinstance(payload, bytes) else json.dumps(payload).encode())
    if alg == "none":
        return f"{head}.{body}."
    mac = hmac.new(key, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(mac)}"


def envelope(verb: str, args: dict[str, Any], **extra: Any) -> bytes:
    """The envelope's bytes (bifrost's test helper) with a ``hostile-`` call id, which the
    body-binding test rewrites to show that one changed byte breaks the token."""
    return envelope_bytes(verb, args, call_id=f"hostile-{uuid.uuid4()}", **extra)


class Tally:
    """What each family of bad input tried, and the outcomes (status, code)."""

    def __init__(self) -> None:
        self.tried: Counter[str] = Counter()
        self.outcomes: dict[str, Counter[str]] = {}
        self.lock = threading.Lock()

    def add(self, family: str, response: httpx.Response) -> None:
        code = ""
        try:
            body = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict):
            err = body.get("error")
            if isinstance(err, dict):
                code = str(err.get("code"))
            elif isinstance(body.get("code"), str):
                code = body["code"]
        with self.lock:
            self.tried[family] += 1
            self.outcomes.setdefault(family, Counter())[
                f"{response.status_code} {code}".strip()
            ] += 1

    def figures(self) -> dict[str, Any]:
        return {
            family: {"tried": self.tried[family], "outcomes": dict(self.outcomes.get(family, {}))}
            for family in sorted(self.tried)
        }


def error_of(response: httpx.Response) -> tuple[int, str]:
    body = response.json()
    return response.status_code, body["error"]["code"]
