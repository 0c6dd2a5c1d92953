"""The store's ids inside the memory plane's one chunk-id namespace.

Chunk ids are global on the memory plane: an id that exists in another grant's scope
cannot be written (403) and reads as absent. LangChain callers choose ids freely
(``ids=["1", "2"]``), so each store maps a caller's id to ``lc.<tag>.<id>``, where
``<tag>`` is a hash of the store's scope: two tenants both adding ``"1"`` write two
different chunks, and each reads back ``"1"``. The tag is not secret (it is derived
from the scope alone, so a key rotation or a local file opened without a key maps the
same ids); only a holder of the Heimdall key can write at all.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping

__all__ = ["MAX_CHUNK_ID_BYTES", "IdNamespace"]

MAX_CHUNK_ID_BYTES = 512
"""The memory plane's longest chunk id, in UTF-8 bytes."""


class IdNamespace:
    """Maps a store's ids to chunk ids and back, for one scope."""

    def __init__(self, scope: Mapping[str, str]) -> None:
        canonical = json.dumps(dict(sorted(scope.items())), separators=(",", ":"))
        digest = hashlib.blake2b(canonical.encode(), digest_size=12, person=b"lc-ratatoskr")
        tag = digest.hexdigest()
        self.prefix = f"lc.{tag}."
        self._room = MAX_CHUNK_ID_BYTES - len(self.prefix)

    def chunk_id(self, doc_id: str | None) -> str:
        """The chunk id of ``doc_id`` (a fresh uuid4 when None). Raises TypeError for an
        id that is not a string, ValueError for one too long for the plane once mapped."""
        if doc_id is None:
            doc_id = str(uuid.uuid4())
        if not isinstance(doc_id, str):
            raise TypeError(f"document ids are strings, got {type(doc_id).__name__}")
        if len(doc_id.encode("utf-8")) > self._room:
            raise ValueError(
                f"a document id is at most {self._room} bytes (UTF-8) in this store: "
                f"the plane's limit is {MAX_CHUNK_ID_BYTES}, less the store's prefix"
            )
        return self.prefix + doc_id

    def doc_id(self, chunk_id: str) -> str:
        """The store's id of ``chunk_id``; a chunk another client wrote under this
        scope (not in this namespace) keeps its chunk id."""
        return chunk_id[len(self.prefix) :] if self.owns(chunk_id) else chunk_id

    def owns(self, chunk_id: str) -> bool:
        """Whether ``chunk_id`` is in this namespace."""
        return chunk_id.startswith(self.prefix)
