"""A store and its embedder must agree on the dimension before any text is written."""

from __future__ import annotations

from ratatoskr.embed.errors import EmbedderMismatch
from ratatoskr.embed.protocol import Embedder


def check_dimension(store_dim: int, embedder: Embedder) -> None:
    """Return when ``embedder.dim == store_dim``; raise ``EmbedderMismatch`` otherwise.

    The message names both numbers, the embedder, and the settings that change either side.
    """
    embedder_dim = embedder.dim
    if embedder_dim == store_dim:
        return
    raise EmbedderMismatch(
        f"the store holds {store_dim}-dimensional embeddings but the embedder "
        f"{embedder.name} makes {embedder_dim}-dimensional ones: choose an embedder of "
        f"{store_dim} dimensions (RATATOSKR_EMBEDDER, RATATOSKR_EMBEDDER_MODEL) or use a "
        f"store created with embedding_dim={embedder_dim}",
        store_dim=store_dim,
        embedder_dim=embedder_dim,
        embedder=embedder.name,
    )
