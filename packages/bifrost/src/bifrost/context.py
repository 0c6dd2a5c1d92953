"""The dispatch context a store sees: who calls, under which grant, for what."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DispatchContext"]


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
    consumer_id: str = "ratatoskr"
    token_id: str | None = None
