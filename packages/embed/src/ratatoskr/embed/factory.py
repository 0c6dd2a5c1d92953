"""Building the embedder the settings name."""

from __future__ import annotations

from ratatoskr.embed.bundled import BundledEmbedder
from ratatoskr.embed.errors import EmbedderConfigError
from ratatoskr.embed.openai import OpenAIEmbedder
from ratatoskr.embed.protocol import Embedder
from ratatoskr.embed.sentence_transformer import SentenceTransformerEmbedder
from ratatoskr.embed.settings import EmbedderSettings


def build_embedder(settings: EmbedderSettings | None = None) -> Embedder:
    """The embedder ``settings`` (by default, the environment's) choose.

    Raises ``EmbedderConfigError`` when a required setting is missing and
    ``EmbedderUnavailable`` when the chosen embedder cannot be loaded here.
    """
    settings = settings if settings is not None else EmbedderSettings()
    if settings.embedder == "bundled":
        return BundledEmbedder(settings.embedder_model, batch_size=settings.embedder_batch_size)
    if settings.embedder == "openai":
        if not settings.embedder_url:
            raise EmbedderConfigError("RATATOSKR_EMBEDDER=openai needs RATATOSKR_EMBEDDER_URL")
        if not settings.embedder_model:
            raise EmbedderConfigError("RATATOSKR_EMBEDDER=openai needs RATATOSKR_EMBEDDER_MODEL")
        return OpenAIEmbedder(
            base_url=settings.embedder_url,
            model=settings.embedder_model,
            api_key=settings.embedder_api_key,
            dim=settings.embedder_dim,
            timeout=settings.embedder_timeout,
            batch_size=settings.embedder_batch_size,
        )
    if not settings.embedder_model:
        raise EmbedderConfigError(
            "RATATOSKR_EMBEDDER=sentence-transformers needs RATATOSKR_EMBEDDER_MODEL"
        )
    return SentenceTransformerEmbedder(
        settings.embedder_model, batch_size=settings.embedder_batch_size
    )
