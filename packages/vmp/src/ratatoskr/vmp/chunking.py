"""Client-side text chunking for ``mem.upsert_text`` (VMP v0 keeps text off the server)."""

from __future__ import annotations

DEFAULT_CHUNK_CHARS = 512


def chunk_text(text: str, *, max_chars: int = DEFAULT_CHUNK_CHARS) -> list[str]:
    """Split ``text`` into chunks of at most ``max_chars`` characters.

    Chunks break at whitespace (runs of whitespace become one space); a word
    longer than ``max_chars`` is cut into pieces. Whitespace-only text gives no
    chunks. Deterministic: the same text always gives the same chunks.
    Raises ValueError when ``max_chars`` < 1.
    """
    if max_chars < 1:
        raise ValueError("max_chars must be at least 1")
    chunks: list[str] = []
    current = ""
    for whole in text.split():
        word = whole
        while len(word) > max_chars:
            if current:
                chunks.append(current)
                current = ""
            chunks.append(word[:max_chars])
            word = word[max_chars:]
        if not word:
            continue
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= max_chars:
            current = f"{current} {word}"
        else:
            chunks.append(current)
            current = word
    if current:
        chunks.append(current)
    return chunks
