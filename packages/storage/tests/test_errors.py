"""One hierarchy of storage errors for every backend."""

from __future__ import annotations

import psycopg
import pytest

from ratatoskr import postgres, sqlite, storage
from ratatoskr.postgres import errors as pg_errors
from ratatoskr.sqlite import errors as sqlite_errors
from ratatoskr.storage import errors


def test_every_class_is_a_storage_error() -> None:
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.StorageError), name


@pytest.mark.parametrize("name", errors.__all__)
def test_both_backends_raise_the_same_classes(name: str) -> None:
    shared = getattr(storage, name)
    assert getattr(sqlite, name) is shared
    assert getattr(sqlite_errors, name) is shared
    assert getattr(postgres, name) is shared
    assert name in sqlite.__all__ and name in postgres.__all__


def test_a_backend_error_is_caught_by_the_other_backends_name() -> None:
    # The provider catches one class for both backends.
    with pytest.raises(sqlite.SchemaMismatch) as caught:
        raise postgres.SchemaMismatch("embedding_dim", "4", "8")
    assert caught.value.setting == "embedding_dim"
    assert caught.value.stored == "4" and caught.value.requested == "8"
    assert caught.value.message == (
        "database was created with embedding_dim=4, but embedding_dim=8 was requested"
    )


def test_postgres_translates_onto_the_shared_classes() -> None:

    translated = pg_errors.translate(psycopg.OperationalError("connection refused by 10.0.0.1"))
    assert isinstance(translated, storage.StorageUnavailable)
    assert "10.0.0.1" not in translated.message
