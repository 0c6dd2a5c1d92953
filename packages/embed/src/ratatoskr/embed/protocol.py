"""What every embedder is: text in, unit vectors of a declared dimension out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class Embedder(Protocol):
    """Text → unit vector (L2 norm 1, Python floats) of ``dim`` components.

    ``embed_documents`` embeds what is stored, ``embed_query`` what is searched with; models
    trained with asymmetric prefixes (e5's ``passage: `` / ``query: ``) get them inside the
    adapter, so callers never add them. The method names are LangChain's ``Embeddings``
    interface, so an embedder can be handed to LangChain as it is.
    """

    @property
    def name(self) -> str:
        """A stable name of the kind and model, e.g. ``bundled:multilingual-e5-small-q4``."""
        ...

    @property
    def dim(self) -> int:
        """How many components every vector has."""
        ...

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text, in order; raises an ``EmbedderError``."""
        ...

    def embed_query(self, text: str) -> list[float]:
        """The unit vector of a search query; raises an ``EmbedderError``."""
        ...
