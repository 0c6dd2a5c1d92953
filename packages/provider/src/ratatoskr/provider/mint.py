"""``ratatoskr token``: a token minted only when the provider would take it.

Whatever the provider would refuse the token for is refused first, in the provider's
own words (``bifrost.auth``) plus what to change, as a ``ConfigError`` naming the flag.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bifrost.auth.tokens import mint_token
from bifrost.names import one_of, safe_name
from bifrost.planes import plane_spec
from ratatoskr.provider.portable import parse_scope
from ratatoskr.provider.settings import ConfigError, Settings

__all__ = ["mint_checked"]


def mint_checked(settings: Settings, args: argparse.Namespace) -> str:
    """The token ``args`` ask for (``--plane``, ``--verb``, ``--body``, ``--actor``,
    ``--scope``, ``--lifetime``, ``--dev``), signed with ``settings``' Heimdall key."""
    verbs = ["handshake", *plane_spec(args.plane).verbs]
    if args.verb not in verbs:
        raise ConfigError(f"--verb: unknown verb {safe_name(args.verb)}{one_of(args.verb, verbs)}")
    if args.lifetime <= 0:
        raise ConfigError("--lifetime: token lifetime is not positive (give seconds, e.g. 60)")
    if args.lifetime > settings.token_max_lifetime_s:
        raise ConfigError(
            f"--lifetime: token lifetime exceeds the maximum ({args.lifetime} > "
            f"{settings.token_max_lifetime_s}, RATATOSKR_TOKEN_MAX_LIFETIME_S)"
        )
    scope = parse_scope(args.scope, malformed="token scope grant malformed: ")
    body = _body(args.body)
    _same_verb(body, args.verb)
    return mint_token(
        _key(settings, dev=args.dev),
        plane=args.plane,
        verb=args.verb,
        body=body,
        actor=args.actor,
        scope=scope,
        issuer=settings.issuer,
        audience=settings.consumer_id,
        lifetime_s=args.lifetime,
    )


def _body(path: str) -> bytes:
    """``--body``: the file's bytes, or stdin's for ``-``."""
    try:
        return Path(path).read_bytes() if path != "-" else sys.stdin.buffer.read()
    except OSError as exc:
        raise ConfigError(f"--body: cannot read {path} ({exc.strerror})") from None


def _same_verb(body: bytes, verb: str) -> None:
    """A body that is an envelope naming another verb than ``--verb`` is refused as the
    provider would refuse the token (a body that is no envelope is the provider's to
    refuse)."""
    try:
        envelope = json.loads(body)
    except ValueError:
        return
    named = envelope.get("verb") if isinstance(envelope, dict) else None
    if isinstance(named, str) and named != verb:
        raise ConfigError(
            f"--verb: token minted for another verb (the body's verb is {safe_name(named)}, "
            f"--verb is {safe_name(verb)})"
        )


def _key(settings: Settings, *, dev: bool) -> bytes:
    """The Heimdall key; without one (and without ``--dev``), where to set it."""
    try:
        return settings.heimdall_key_bytes()
    except ConfigError as exc:
        if dev or not str(exc).startswith("no Heimdall key"):
            raise
        raise ConfigError(
            "no Heimdall key: set RATATOSKR_HEIMDALL_KEY or RATATOSKR_HEIMDALL_KEY_FILE to "
            "the provider's key, or pass --dev for the key `serve --dev` uses "
            "(var/dev-heimdall.key)"
        ) from None
