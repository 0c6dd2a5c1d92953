"""What a consumer declares about itself to the wire library."""

from __future__ import annotations

from dataclasses import dataclass

from bifrost.context import DEFAULT_CONSUMER_ID
from bifrost.envelope import DEFAULT_MAX_JSON_CONTAINERS
from bifrost.planes import WIRE_PLANES

__all__ = ["DEFAULT_MAX_BODY_BYTES", "DEFAULT_MAX_JSON_CONTAINERS", "ConsumerRegistration"]

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class ConsumerRegistration:
    """``consumer_id`` is the token audience and the handshake's ``consumer_id``;
    ``planes`` the planes this consumer serves; ``max_body_bytes`` the request
    body limit (larger → 413); ``max_json_containers`` the most JSON objects and
    arrays one body may hold (more → 400 before it is parsed)."""

    consumer_id: str = DEFAULT_CONSUMER_ID
    planes: tuple[str, ...] = WIRE_PLANES
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_json_containers: int = DEFAULT_MAX_JSON_CONTAINERS

    def __post_init__(self) -> None:
        if not self.consumer_id:
            raise ValueError("consumer_id must be non-empty")
        if self.max_body_bytes < 1 or self.max_json_containers < 1:
            raise ValueError("max_body_bytes and max_json_containers must be positive")
        if not set(self.planes) <= set(WIRE_PLANES):
            raise ValueError(f"planes must be drawn from {', '.join(WIRE_PLANES)}")
