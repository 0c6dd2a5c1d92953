"""Text to unit vectors for ratatoskr's text-in/text-out doors (MCP, LangChain).

``build_embedder()`` gives the embedder ``RATATOSKR_EMBEDDER`` names; the default is bundled
and works offline. ``check_dimension(store_dim, embedder)`` refuses a store of another size.
"""

from ratatoskr.embed.bundled import BUNDLED_MODELS, DEFAULT_BUNDLED_MODEL, BundledEmbedder
from ratatoskr.embed.dimension import check_dimension
from ratatoskr.embed.errors import (
    EmbedderConfigError,
    EmbedderError,
    EmbedderInputError,
    EmbedderMismatch,
    EmbedderRequestFailed,
    EmbedderResponseInvalid,
    EmbedderUnavailable,
)
from ratatoskr.embed.factory import build_embedder
from ratatoskr.embed.openai import OpenAIEmbedder
from ratatoskr.embed.protocol import Embedder
from ratatoskr.embed.sentence_transformer import SentenceTransformerEmbedder
from ratatoskr.embed.settings import EmbedderKind, EmbedderSettings

__all__ = [
    "BUNDLED_MODELS",
    "DEFAULT_BUNDLED_MODEL",
    "BundledEmbedder",
    "Embedder",
    "EmbedderConfigError",
    "EmbedderError",
    "EmbedderInputError",
    "EmbedderKind",
    "EmbedderMismatch",
    "EmbedderRequestFailed",
    "EmbedderResponseInvalid",
    "EmbedderSettings",
    "EmbedderUnavailable",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "build_embedder",
    "check_dimension",
]
