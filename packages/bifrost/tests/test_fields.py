"""bifrost.fields: the filterable fields an operator may declare."""

from __future__ import annotations

import pytest

from bifrost.consumer.testing import InMemoryMemoryStore
from bifrost.errors import InvalidArguments
from bifrost.fields import EMBEDDING_FIELDS, field_path, fields_setting, validate_fields
from bifrost.memory.options import retention_and_fields
from bifrost.memory.validation import embedding_field

IN_THE_EMBEDDINGS_PLACE = ["embedding", "vector", "embedding.0", "vector.x"]


def test_paths_split_on_dots_and_empty_parts_are_refused() -> None:
    assert field_path("metadata.kind") == ("metadata", "kind")
    for bad in ["", "a..b", ".a", "a."]:
        with pytest.raises(ValueError, match="filterable field"):
            field_path(bad)


def test_duplicates_count_once_in_the_order_given() -> None:
    assert validate_fields(["b", "a", "b"]) == ("b", "a")
    assert fields_setting(" kind , ,metadata.x,kind") == ("kind", "metadata.x")


def test_the_embeddings_place_is_no_filterable_field() -> None:
    # Both places bifrost reads an embedding from are refused, and only those.
    assert {embedding_field({"embedding": 1}), embedding_field({"vector": 1})} == EMBEDDING_FIELDS
    for field in IN_THE_EMBEDDINGS_PLACE:
        with pytest.raises(ValueError, match="embedding"):
            validate_fields(["kind", field])
        with pytest.raises(ValueError, match="embedding"):
            fields_setting(f"kind,{field}")
        with pytest.raises(InvalidArguments, match="embedding"):
            retention_and_fields(None, [field])
        with pytest.raises(ValueError, match="embedding"):
            InMemoryMemoryStore(4, filterable_fields=[field])
    # The same names deeper in the record are metadata like any other.
    assert validate_fields(["metadata.embedding", "metadata.vector", "embeddings"]) == (
        "metadata.embedding",
        "metadata.vector",
        "embeddings",
    )
