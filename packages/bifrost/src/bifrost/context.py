"""The dispatch context a store sees: who calls, under which grant, for what.

:data:`DEFAULT_CONSUMER_ID` is the one default consumer id of the library: the
token audience a verifier expects, a client mints for and a registration
declares, when none is given. Its value is the seed contract's consumer
(Heimdall mints for audience ``"ratatoskr"`` and every existing caller of the
client relies on it); a consumer with another name passes its own everywhere
(``ConsumerRegistration(consumer_id=…)``, ``JwtVerifier(audience=…)``,
``BifrostClient(audience=…)``)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DEFAULT_CONSUMER_ID", "DispatchContext"]

DEFAULT_CONSUMER_ID = "ratatoskr"


@dataclass(frozen=True)
class DispatchContext:
    """Identity of one dispatch (INV-008: identity, scope and actor come from here,
    never from call arguments or records).

    ``scope`` is the token's grant (``{}`` = unrestricted).
    """

    actor: str
    scope: dict[str, str] = field(default_factory=dict)
    call_id: str | None = None
    plane: str = "memory"
    verb: str = ""
    consumer_id: str = DEFAULT_CONSUMER_ID
    token_id: str | None = None
