"""The embedder's typed errors: data with a stable ``code``, never an echo of text or vectors.

A caller (the MCP server, the LangChain store) renders them in one place; none of them
carries the text that was being embedded, a vector, a response body or a key.
"""

from __future__ import annotations


class EmbedderError(Exception):
    """Base of every error this package raises."""

    code = "embed.error"


class EmbedderConfigError(EmbedderError):
    """The settings name no usable embedder (a missing URL or model, an unknown choice)."""

    code = "embed.config"


class EmbedderUnavailable(EmbedderError):
    """The chosen embedder cannot be loaded here (its package is not installed, or its model)."""

    code = "embed.unavailable"


class EmbedderInputError(EmbedderError):
    """What was handed in is not text (a ``str`` where a list was expected, a non-``str`` item)."""

    code = "embed.input"


class EmbedderRequestFailed(EmbedderError):
    """A remote embeddings endpoint could not be reached or answered with an HTTP error.

    ``status`` is the HTTP status, or ``None`` when no answer came at all.
    """

    code = "embed.request_failed"

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class EmbedderResponseInvalid(EmbedderError):
    """An embedder answered with something that is not one finite vector per text of ``dim``."""

    code = "embed.response_invalid"


class EmbedderMismatch(EmbedderError):
    """A store's ``embedding_dim`` differs from the embedder's ``dim``."""

    code = "embed.dimension_mismatch"

    def __init__(self, message: str, *, store_dim: int, embedder_dim: int, embedder: str) -> None:
        super().__init__(message)
        self.store_dim = store_dim
        self.embedder_dim = embedder_dim
        self.embedder = embedder
