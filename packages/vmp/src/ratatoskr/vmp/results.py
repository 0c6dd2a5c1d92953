"""What the store's operations answer: an upsert's assigned ids and a search's hits.

Both carry their wire shape (``to_json``), so the app renders them without knowing
their fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from ratatoskr.vmp.fixedpoint import score_of


@dataclass(frozen=True)
class UpsertResult:
    """What an upsert assigned."""

    record_id: int
    document_node_id: int
    chunk_node_id: int

    @property
    def memory_id(self) -> str:
        return f"rec:{self.record_id}"

    def to_json(self) -> dict[str, Any]:
        """The wire shape of ``mem.upsert_vector``."""
        return {
            "memory_id": self.memory_id,
            "record_id": self.record_id,
            "document_node_id": self.document_node_id,
            "chunk_node_id": self.chunk_node_id,
        }


class SearchHit(NamedTuple):
    """One search result; ``squared_distance`` is exact, in squared Q16.16 units.

    A named tuple rather than a frozen dataclass: a search builds k of them, and a
    tuple is built in half the time."""

    record_id: int
    squared_distance: int
    metadata: Any

    @property
    def memory_id(self) -> str:
        return f"rec:{self.record_id}"

    @property
    def score(self) -> float:
        """The squared L2 distance in real units (``squared_distance / 2**32``)."""
        return score_of(self.squared_distance)

    def to_json(self) -> dict[str, Any]:
        """The wire shape of one ``mem.search_vector`` result."""
        return {
            "memory_id": self.memory_id,
            "record_id": self.record_id,
            "score": self.score,
            "metadata": self.metadata,
        }


def search_hits(top: list[tuple[int, int]], metadata: dict[int, Any]) -> list[SearchHit]:
    """The hits of ``top`` (record_id, squared distance) with the metadata of those that have it."""
    return [SearchHit(rid, dist, metadata.get(rid)) for rid, dist in top]
