"""What a consumer declares about itself to the wire library."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_MAX_BODY_BYTES", "ConsumerRegistration"]

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class ConsumerRegistration:
    """``consumer_id`` is the token audience and the handshake's ``consumer_id``;
    ``planes`` the planes this consumer serves; ``max_body_bytes`` the request
    body limit (larger → 413)."""

    consumer_id: str = "ratatoskr"
    planes: tuple[str, ...] = ("memory", "affect")
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    def __post_init__(self) -> None:
        if not self.consumer_id:
            raise ValueError("consumer_id must be non-empty")
        if self.max_body_bytes < 1:
            raise ValueError("max_body_bytes must be positive")
        unknown = set(self.planes) - {"memory", "affect"}
        if unknown:
            raise ValueError("planes must be drawn from memory, affect")
