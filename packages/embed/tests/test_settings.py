"""EmbedderSettings and build_embedder: the setting picks the adapter, missing pieces are named."""

from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError

from ratatoskr.embed import (
    BundledEmbedder,
    EmbedderConfigError,
    EmbedderSettings,
    OpenAIEmbedder,
    build_embedder,
)


def test_defaults_to_the_bundled_embedder() -> None:
    settings = EmbedderSettings()
    assert settings.embedder == "bundled"
    embedder = build_embedder(settings)
    assert isinstance(embedder, BundledEmbedder)
    assert embedder.dim == 384
    enpt = build_embedder(EmbedderSettings(embedder_model="e5-small-enpt-q4"))
    assert enpt.name == "bundled:e5-small-enpt-q4"


def test_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RATATOSKR_EMBEDDER", "openai")
    monkeypatch.setenv("RATATOSKR_EMBEDDER_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("RATATOSKR_EMBEDDER_MODEL", "nomic-embed-text")
    monkeypatch.setenv("RATATOSKR_EMBEDDER_API_KEY", "sk-from-env")
    monkeypatch.setenv("RATATOSKR_EMBEDDER_DIM", "768")
    monkeypatch.setenv("RATATOSKR_DB", "unrelated provider setting")  # ignored here
    settings = EmbedderSettings()
    assert settings.embedder_api_key == SecretStr("sk-from-env")
    assert "sk-from-env" not in repr(settings)
    embedder = build_embedder()  # no request is made to build it
    assert isinstance(embedder, OpenAIEmbedder)
    assert (embedder.name, embedder.dim) == ("openai:nomic-embed-text", 768)


def test_missing_pieces_are_named() -> None:
    with pytest.raises(EmbedderConfigError, match="RATATOSKR_EMBEDDER_URL"):
        build_embedder(EmbedderSettings(embedder="openai", embedder_model="m"))
    with pytest.raises(EmbedderConfigError, match="RATATOSKR_EMBEDDER_MODEL"):
        build_embedder(EmbedderSettings(embedder="openai", embedder_url="http://127.0.0.1:9"))
    with pytest.raises(EmbedderConfigError, match="RATATOSKR_EMBEDDER_MODEL"):
        build_embedder(EmbedderSettings(embedder="sentence-transformers"))
    with pytest.raises(EmbedderConfigError, match="bundled model"):
        build_embedder(EmbedderSettings(embedder_model="text-embedding-3-small"))


def test_values_out_of_range_are_refused() -> None:
    with pytest.raises(ValidationError):
        EmbedderSettings(embedder="fastembed")
    with pytest.raises(ValidationError):
        EmbedderSettings(embedder_dim=0)
    with pytest.raises(ValidationError):
        EmbedderSettings(embedder_timeout=0)
    with pytest.raises(ValidationError):
        EmbedderSettings(embedder_batch_size=0)
