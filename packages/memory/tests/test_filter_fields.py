"""The SQLite memory store refuses a filterable field in an embedding's place at open,
before any file is made (bifrost.fields.EMBEDDING_FIELDS): an embedding is kept apart
from the record's JSON, and PostgreSQL's filters, which read only that JSON, would
never match it where SQLite's would."""

from __future__ import annotations

from pathlib import Path

import pytest

from bifrost.errors import InvalidArguments
from ratatoskr.memory import open_memory_store


@pytest.mark.parametrize("field", ["embedding", "vector", "vector.0"])
def test_an_embedding_field_is_refused_and_nothing_is_made(tmp_path: Path, field: str) -> None:
    path = tmp_path / "m.db"
    with pytest.raises(InvalidArguments, match="embedding"):
        open_memory_store(str(path), embedding_dim=4, filterable_fields=["kind", field])
    assert list(tmp_path.iterdir()) == []


def test_the_same_names_inside_metadata_are_filterable(tmp_path: Path) -> None:
    store = open_memory_store(
        str(tmp_path / "m.db"), embedding_dim=4, filterable_fields=["metadata.embedding"]
    )
    try:
        assert store.describe_store()["filterable_metadata_fields"] == ["metadata.embedding"]
    finally:
        store.close()
