"""The project's retrieval set (benchmarks/embed_bench.py measures embedders on it) is what the
README says it is: 300+ paraphrased pairs over 15+ topics, with distractors."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

DATA = Path(__file__).with_name("data") / "retrieval.jsonl"
COMMON = set(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "my",
        "of",
        "on",
        "or",
        "should",
        "the",
        "to",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "with",
        "you",
        "your",
    ]
)


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w+", text.lower()) if w not in COMMON}


def test_the_set_has_paraphrased_pairs_over_topics_and_distractors() -> None:
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
    pairs = [r for r in rows if r["query"] is not None]
    distractors = [r for r in rows if r["query"] is None]
    assert len(pairs) >= 300
    assert len({r["topic"] for r in pairs}) >= 15
    assert len(distractors) >= 75
    assert all(n >= 4 for n in Counter(r["topic"] for r in distractors).values())
    assert len({r["id"] for r in rows}) == len(rows)
    assert len({r["passage"] for r in rows}) == len(rows)
    assert len({r["query"] for r in pairs}) == len(pairs)
    # Paraphrases: most queries share no content word with their passage at all.
    disjoint = sum(1 for r in pairs if not words(r["query"]) & words(r["passage"]))
    assert disjoint / len(pairs) > 0.75
