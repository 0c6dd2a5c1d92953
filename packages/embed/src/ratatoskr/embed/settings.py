"""Which embedder to build, from ``RATATOSKR_EMBEDDER*`` (or keyword arguments in tests)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

EmbedderKind = Literal["bundled", "openai", "sentence-transformers"]


class EmbedderSettings(BaseSettings):
    """The embedder's settings; the field names are the provider's, so they can move there."""

    model_config = SettingsConfigDict(env_prefix="RATATOSKR_", extra="ignore")

    embedder: EmbedderKind = Field(
        default="bundled",
        description=(
            "Which embedder turns text into vectors: `bundled` (multilingual-e5-small, 4-bit, "
            "384 dimensions, shipped inside the wheel, works offline), `openai` (an "
            "OpenAI-compatible /embeddings endpoint) or `sentence-transformers` (installed "
            "by the user)."
        ),
    )
    embedder_model: str | None = Field(
        default=None,
        description=(
            "The model: for `bundled` one of multilingual-e5-small-q4 (default) or "
            "e5-small-enpt-q4; for `openai` the model name sent to the endpoint (required); "
            "for `sentence-transformers` a model name or path (required)."
        ),
    )
    embedder_url: str | None = Field(
        default=None,
        description="`openai` only: the base URL; requests go to {url}/embeddings (required).",
    )
    embedder_api_key: SecretStr | None = Field(
        default=None,
        description="`openai` only: sent as `Authorization: Bearer …`; never logged.",
    )
    embedder_dim: int | None = Field(
        default=None,
        ge=1,
        description=(
            "`openai` only: the dimension the model returns; unset, the first answer decides."
        ),
    )
    embedder_timeout: float = Field(
        default=30.0,
        gt=0,
        description="`openai` only: seconds to wait for one request.",
    )
    embedder_batch_size: int = Field(
        default=64,
        ge=1,
        le=2048,
        description="Texts per model call (per request for `openai`).",
    )
