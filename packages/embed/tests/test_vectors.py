"""The shared checks: unit rows of the declared shape, and which models want e5's prefixes."""

from __future__ import annotations

import numpy as np
import pytest

from ratatoskr.embed import EmbedderResponseInvalid
from ratatoskr.embed.vectors import e5_prefixes, unit_rows


def test_unit_rows_scales_to_length_one() -> None:
    rows = unit_rows(np.array([[3.0, 4.0], [0.0, -2.0]], dtype=np.float32), count=2, dim=2)
    assert rows == [[0.6, 0.8], [0.0, -1.0]]
    assert unit_rows([], count=0, dim=384) == []


@pytest.mark.parametrize(
    ("rows", "count", "dim", "match"),
    [
        ([[1.0, 0.0]], 2, 2, "1 vectors of 2 where 2 vectors of 2"),
        ([1.0, 0.0], 1, 2, "shape"),
        ([[1.0, 0.0], [1.0]], 2, 2, "not numbers"),
        ([[float("inf"), 0.0]], 1, 2, "not finite"),
        ([[0.0, 0.0]], 1, 2, "all-zero"),
    ],
)
def test_unit_rows_refuses(rows: object, count: int, dim: int, match: str) -> None:
    with pytest.raises(EmbedderResponseInvalid, match=match):
        unit_rows(rows, count=count, dim=dim)


@pytest.mark.parametrize(
    ("model", "prefixed"),
    [
        ("intfloat/multilingual-e5-small", True),
        ("intfloat/e5-base-v2", True),
        ("multilingual-e5-large-instruct", True),
        ("text-embedding-3-small", False),
        ("BAAI/bge-small-en-v1.5", False),
        ("nomic-ai/nomic-embed-text-v1.5", False),
        ("my-e5-finetune", False),
    ],
)
def test_e5_prefixes(model: str, prefixed: bool) -> None:
    expected = ("query: ", "passage: ") if prefixed else ("", "")
    assert e5_prefixes(model) == expected
