"""Envelopes and tokens for tests of anything that speaks the Bifrost wire.

One home for each kind of test helper, so that a test builds what it sends one way:

- envelopes, their bytes and signed headers: here (``bifrost.consumer.testing.helpers``);
- the spy store and ``Wire`` (sign and post to one plane app through any
  ``httpx.Client``): :mod:`bifrost.consumer.testing.support`;
- the conformance kit's own records: :mod:`bifrost.consumer.testing.conformance`;
- memory chunks and their embeddings: :mod:`ratatoskr.memory.testing` (bifrost knows
  nothing of ratatoskr, so its own tests build chunks with the kit's helpers);
- real server processes: :mod:`ratatoskr.provider.testing`.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from bifrost.auth import mint_token
from bifrost.envelope import WIRE_VERSION


def envelope(
    verb: str,
    args: dict[str, Any] | None = None,
    *,
    call_id: str | None = None,
    idempotency_key: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """An envelope for ``verb`` at the current wire version: a fresh ``call_id`` unless
    one is given, ``args`` (``{}`` by default), the idempotency key when given, then
    ``extra`` top-level fields as they are (a test of bad input may pass anything)."""
    env: dict[str, Any] = {
        "wire_version": WIRE_VERSION,
        "call_id": call_id or f"call-{uuid.uuid4()}",
        "verb": verb,
        "args": {} if args is None else args,
    }
    if idempotency_key is not None:
        env["idempotency_key"] = idempotency_key
    env.update(extra)
    return env


def envelope_bytes(verb: str, args: dict[str, Any] | None = None, **fields: Any) -> bytes:
    """:func:`envelope` as the UTF-8 JSON body a client sends (non-ASCII kept as is)."""
    return json.dumps(envelope(verb, args, **fields), ensure_ascii=False).encode()


def signed_headers(
    key: bytes,
    body: bytes,
    *,
    plane: str,
    verb: str,
    actor: str = "agent",
    scope: dict[str, str] | None = None,
    **claims: Any,
) -> dict[str, str]:
    """The headers of a call carrying ``body``: JSON content type and a bearer token
    minted with ``key`` for ``plane``/``verb``, bound to the body (``claims`` go to
    :func:`bifrost.auth.mint_token`: ``audience``, ``lifetime_s``, ``jti``, …)."""
    token = mint_token(key, plane=plane, verb=verb, body=body, actor=actor, scope=scope, **claims)
    return {"content-type": "application/json", "authorization": f"Bearer {token}"}
