"""A tiny deterministic embedder for the MCP tests (loaded by ``--embedder-factory``).

Words hash (BLAKE2b) onto 64 components; a text's vector is the unit sum of its words'.
Texts sharing words are close, so a query finds what it names, in microseconds and the
same in every process.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence

DIM = 64


class HashEmbedder:
    name = "test:hash-64"
    dim = DIM

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)

    @staticmethod
    def _vector(text: str) -> list[float]:
        out = [0.0] * DIM
        for word in re.findall(r"\w+", text.lower()):
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            slot = int.from_bytes(digest[:4], "little") % DIM
            out[slot] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(x * x for x in out))
        if norm == 0.0:
            out[0], norm = 1.0, 1.0
        return [x / norm for x in out]


def make() -> HashEmbedder:
    return HashEmbedder()
