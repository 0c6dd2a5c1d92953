"""sentence-transformers: a clear error without it; with it (a stand-in module with the same
interface, since it is not a dependency), prefixes, batching and unit vectors."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest

from ratatoskr.embed import (
    Embedder,
    EmbedderConfigError,
    EmbedderSettings,
    EmbedderUnavailable,
    SentenceTransformerEmbedder,
    build_embedder,
)


def test_absent_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import fails
    with pytest.raises(EmbedderUnavailable) as caught:
        SentenceTransformerEmbedder("intfloat/multilingual-e5-small")
    message = str(caught.value)
    assert "pip install sentence-transformers" in message
    assert "RATATOSKR_EMBEDDER=bundled" in message
    assert caught.value.__cause__ is None
    with pytest.raises(EmbedderUnavailable, match="pip install sentence-transformers"):
        build_embedder(
            EmbedderSettings(embedder="sentence-transformers", embedder_model="all-MiniLM-L6-v2")
        )


class FakeModel:
    """The part of SentenceTransformer the adapter uses; records what it is asked."""

    calls: list[list[str]]

    def __init__(self, name: str, device: str | None = None, *, dim: int | None = 3) -> None:
        if name == "missing/model":
            raise OSError("not found on the hub")
        self.name, self.device, self.dim, self.calls = name, device, dim, []

    def get_sentence_embedding_dimension(self) -> int | None:
        return self.dim

    def encode(self, texts: list[str], **kwargs: Any) -> np.ndarray:
        self.calls.append(list(texts))
        return np.array([[float(len(t)), 1.0, 2.0] for t in texts])


@pytest.fixture
def fake_module(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    module = types.SimpleNamespace(SentenceTransformer=FakeModel)
    monkeypatch.setitem(sys.modules, "sentence_transformers", module)
    return module


def test_e5_model_gets_prefixes_batches_and_unit_vectors(
    fake_module: types.SimpleNamespace,
) -> None:
    embedder = SentenceTransformerEmbedder("intfloat/multilingual-e5-small", batch_size=2)
    assert isinstance(embedder, Embedder)
    assert embedder.name == "sentence-transformers:intfloat/multilingual-e5-small"
    assert embedder.dim == 3
    vectors = embedder.embed_documents(["a", "bb", "ccc"])
    query = embedder.embed_query("dd")
    model = embedder._model
    assert model.calls == [["passage: a", "passage: bb"], ["passage: ccc"], ["query: dd"]]
    for vector, text in zip(
        [*vectors, query], ["passage: a", "passage: bb", "passage: ccc", "query: dd"], strict=True
    ):
        expected = np.array([len(text), 1.0, 2.0])
        assert np.allclose(vector, expected / np.linalg.norm(expected))


def test_other_models_get_no_prefix_unless_told(fake_module: types.SimpleNamespace) -> None:
    plain = SentenceTransformerEmbedder("sentence-transformers/all-MiniLM-L6-v2")
    plain.embed_query("q")
    told = SentenceTransformerEmbedder("BAAI/bge-small-en-v1.5", query_prefix="Represent: ")
    told.embed_query("q")
    told.embed_documents(["p"])
    assert plain._model.calls == [["q"]]
    assert told._model.calls == [["Represent: q"], ["p"]]


def test_dimension_from_one_vector_when_the_model_does_not_say(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Silent(FakeModel):
        def __init__(self, name: str, device: str | None = None) -> None:
            super().__init__(name, device, dim=None)

    monkeypatch.setitem(
        sys.modules, "sentence_transformers", types.SimpleNamespace(SentenceTransformer=Silent)
    )
    embedder = SentenceTransformerEmbedder("custom/model")
    assert embedder.dim == 3
    assert embedder._model.calls == [["dimension probe"]]


def test_model_that_cannot_load_or_be_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        sys.modules, "sentence_transformers", types.SimpleNamespace(SentenceTransformer=FakeModel)
    )
    with pytest.raises(EmbedderUnavailable, match="could not load the model 'missing/model'"):
        SentenceTransformerEmbedder("missing/model")

    class Shapeless(FakeModel):
        def __init__(self, name: str, device: str | None = None) -> None:
            super().__init__(name, device, dim=None)

        def encode(self, texts: list[str], **kwargs: Any) -> np.ndarray:
            return np.zeros((1, 0))

    monkeypatch.setitem(
        sys.modules, "sentence_transformers", types.SimpleNamespace(SentenceTransformer=Shapeless)
    )
    with pytest.raises(EmbedderUnavailable, match="no dimension"):
        SentenceTransformerEmbedder("odd/model")


def test_settings_it_cannot_work_with(fake_module: types.SimpleNamespace) -> None:
    with pytest.raises(EmbedderConfigError, match="RATATOSKR_EMBEDDER_MODEL"):
        SentenceTransformerEmbedder("")
    with pytest.raises(EmbedderConfigError, match="batch size"):
        SentenceTransformerEmbedder("m", batch_size=0)
