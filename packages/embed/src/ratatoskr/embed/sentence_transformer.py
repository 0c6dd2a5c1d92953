"""sentence-transformers if the user installed it (``RATATOSKR_EMBEDDER=sentence-transformers``).

It is not a dependency of ratatoskr: it brings torch and fetches models from a hub, which an
offline host cannot do. It is imported only when this embedder is built.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Sequence
from typing import Any

from ratatoskr.embed.errors import EmbedderConfigError, EmbedderUnavailable
from ratatoskr.embed.vectors import batches, check_text, check_texts, e5_prefixes, unit_rows

INSTALL_HINT = (
    "RATATOSKR_EMBEDDER=sentence-transformers needs the sentence-transformers package, "
    "which ratatoskr does not install: pip install sentence-transformers (into the "
    "environment ratatoskr runs in), or choose RATATOSKR_EMBEDDER=bundled"
)


def _import_sentence_transformers() -> Any:
    try:
        return importlib.import_module("sentence_transformers")
    except ImportError:
        raise EmbedderUnavailable(INSTALL_HINT) from None


class SentenceTransformerEmbedder:
    """A local sentence-transformers model by name or path.

    ``query_prefix`` and ``passage_prefix`` default to e5's for an e5 model name and to
    nothing otherwise. Raises ``EmbedderUnavailable`` when sentence-transformers is not
    installed or the model cannot be loaded, ``EmbedderConfigError`` without a model name.
    """

    def __init__(
        self,
        model: str,
        *,
        device: str | None = None,
        batch_size: int = 64,
        query_prefix: str | None = None,
        passage_prefix: str | None = None,
    ) -> None:
        if not model:
            raise EmbedderConfigError(
                "the sentence-transformers embedder needs RATATOSKR_EMBEDDER_MODEL"
            )
        if batch_size < 1:
            raise EmbedderConfigError("the batch size must be at least 1")
        module = _import_sentence_transformers()
        try:
            self._model = module.SentenceTransformer(model, device=device)
        except (OSError, ValueError) as exc:
            raise EmbedderUnavailable(
                f"sentence-transformers could not load the model {model!r} "
                f"({type(exc).__name__}); check RATATOSKR_EMBEDDER_MODEL"
            ) from None
        self._model_name = model
        self._batch_size = batch_size
        default_query, default_passage = e5_prefixes(model)
        self._query_prefix = default_query if query_prefix is None else query_prefix
        self._passage_prefix = default_passage if passage_prefix is None else passage_prefix
        # A torch module is not promised to be safe under concurrent forward passes.
        self._lock = threading.Lock()
        self._dim = self._declared_dim()

    @property
    def name(self) -> str:
        """``sentence-transformers:<model>``."""
        return f"sentence-transformers:{self._model_name}"

    @property
    def dim(self) -> int:
        """The model's sentence-embedding dimension."""
        return self._dim

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """Passage vectors, in batches of ``batch_size``."""
        items = [self._passage_prefix + text for text in check_texts(texts)]
        out: list[list[float]] = []
        for batch in batches(items, self._batch_size):
            out.extend(self._encode(batch))
        return out

    def embed_query(self, text: str) -> list[float]:
        """The query vector."""
        return self._encode([self._query_prefix + check_text(text)])[0]

    def _encode(self, batch: list[str]) -> list[list[float]]:
        with self._lock:
            rows = self._model.encode(
                batch, batch_size=len(batch), convert_to_numpy=True, show_progress_bar=False
            )
        return unit_rows(rows, count=len(batch), dim=self._dim)

    def _declared_dim(self) -> int:
        # The accessor was renamed across releases; whichever this version has.
        for accessor in ("get_sentence_embedding_dimension", "get_embedding_dimension"):
            method = getattr(self._model, accessor, None)
            if method is not None:
                dim = method()
                if isinstance(dim, int) and dim > 0:
                    return dim
        # A model that does not say (some custom modules): the width of one vector.
        with self._lock:
            rows = self._model.encode(["dimension probe"], convert_to_numpy=True)
        shape: tuple[int, ...] = tuple(getattr(rows, "shape", ()))
        if len(shape) != 2 or shape[0] != 1 or shape[1] < 1:
            raise EmbedderUnavailable(
                f"sentence-transformers gives no dimension for {self._model_name!r}"
            )
        return int(shape[1])
