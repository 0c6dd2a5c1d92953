"""LangChain dict filters as the plane's metadata_filter (the mapping alone; the
server's evaluation is in test_vectorstore)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_ratatoskr.filters import metadata_filter


@pytest.mark.parametrize(
    ("given", "sent"),
    [
        (None, None),
        ({}, None),
        ({"kind": "note"}, {"metadata.kind": {"$eq": "note"}}),
        ({"kind": None}, {"metadata.kind": {"$eq": None}}),
        (
            {"year": {"$gte": 2020, "$lt": 2025}, "kind": {"$in": ["a", "b"]}},
            {"metadata.year": {"$gte": 2020, "$lt": 2025}, "metadata.kind": {"$in": ["a", "b"]}},
        ),
        ({"a.b": {"$exists": True}}, {"metadata.a.b": {"$exists": True}}),
        (
            {"$and": [{"year": {"$gte": 2020}}, {"year": {"$lt": 2025}}, {"kind": "x"}]},
            {"metadata.year": {"$gte": 2020, "$lt": 2025}, "metadata.kind": {"$eq": "x"}},
        ),
        ({"$and": []}, None),
    ],
)
def test_filters_map_onto_metadata_fields(given: Any, sent: Any) -> None:
    assert metadata_filter(given) == sent


@pytest.mark.parametrize(
    ("given", "error", "message"),
    [
        ({"$or": [{"a": 1}, {"b": 2}]}, ValueError, r"\$or has no counterpart"),
        ({"$not": {"a": 1}}, ValueError, r"\$not has no counterpart"),
        ({"a": {"$regex": "x"}}, ValueError, r"'\$regex' is not an operator"),
        ({"a": {"$eq": 1, "$like": "x"}}, ValueError, r"'\$like' is not an operator"),
        ({"a": {}}, ValueError, "an empty condition"),
        ({"a": 1, "$and": [{"a": 2}]}, ValueError, r"'a' is given \$eq twice"),
        ({"$and": {"a": 1}}, ValueError, r"\$and takes a list"),
        ({"$and": ["a"]}, TypeError, r"filter.\$and\[0\] must be a dict"),
        ({"": 1}, ValueError, "non-empty strings"),
        ({1: 1}, ValueError, "non-empty strings"),
        (["a"], TypeError, "must be a dict"),
    ],
)
def test_filters_the_plane_cannot_evaluate_are_refused(
    given: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        metadata_filter(given)
