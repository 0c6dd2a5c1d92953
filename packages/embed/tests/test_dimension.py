"""check_dimension: a store and an embedder of different sizes are refused, by name."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from ratatoskr.embed import BundledEmbedder, EmbedderMismatch, check_dimension


class Sized:
    name = "openai:text-embedding-3-large"
    dim = 3072

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        raise AssertionError("check_dimension embeds nothing")

    def embed_query(self, text: str) -> list[float]:
        raise AssertionError("check_dimension embeds nothing")


def test_equal_dimensions_pass(bundled: BundledEmbedder) -> None:
    check_dimension(384, bundled)
    check_dimension(3072, Sized())


def test_different_dimensions_name_both_and_the_settings(bundled: BundledEmbedder) -> None:
    with pytest.raises(EmbedderMismatch) as caught:
        check_dimension(768, bundled)
    error = caught.value
    assert (error.store_dim, error.embedder_dim) == (768, 384)
    assert error.embedder == "bundled:multilingual-e5-small-q4"
    assert error.code == "embed.dimension_mismatch"
    message = str(error)
    for part in ("768", "384", "bundled:multilingual-e5-small-q4", "RATATOSKR_EMBEDDER"):
        assert part in message

    with pytest.raises(EmbedderMismatch, match=r"384.*3072"):
        check_dimension(384, Sized())
