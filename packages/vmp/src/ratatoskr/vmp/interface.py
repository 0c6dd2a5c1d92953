"""What the store and the client share of the VMP operations' Python interface.

Both are closable resources used as context managers, and both take
``mem.upsert_vector``'s optional fields as the same keywords: those are declared
once here, as :class:`ClosesOnExit` and the :class:`UpsertOptions` they unpack.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, Self, TypedDict


class ClosesOnExit(abc.ABC):
    """``with resource: …`` closes it when the block ends, however it ends."""

    __slots__ = ()

    @abc.abstractmethod
    def close(self) -> None:
        """Release the resource; idempotent."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class UpsertOptions(TypedDict, total=False):
    """The optional fields of ``mem.upsert_vector``, as keywords (``**options``).

    ``attach_to_document_node``: the document node the new chunk joins (a new
    document otherwise); ``tags``: strings kept with the record; ``metadata``:
    the record's JSON metadata. Each may be given as None, which is leaving it out.
    """

    attach_to_document_node: int | None
    tags: Sequence[str] | None
    metadata: Any


_UPSERT_KEYWORDS = frozenset(UpsertOptions.__optional_keys__)


def upsert_fields(options: UpsertOptions) -> tuple[int | None, Sequence[str] | None, Any]:
    """``(attach_to_document_node, tags, metadata)`` of ``options``, None where absent.

    Raises TypeError for a keyword that is not one of them, as a signature would.
    """
    unknown = options.keys() - _UPSERT_KEYWORDS
    if unknown:
        raise TypeError(f"upsert_vector() got an unexpected keyword argument {min(unknown)!r}")
    return (
        options.get("attach_to_document_node"),
        options.get("tags"),
        options.get("metadata"),
    )
