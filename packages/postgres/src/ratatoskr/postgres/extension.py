"""The pgvector extension: created when missing (if the role may), found wherever it lives.

The memory schema's SQL names the type and the operator with the extension's
schema (``"public".vector``, ``OPERATOR("public".<#>)``), so the store works
whatever ``search_path`` a pooled connection has, and with an extension an
operator installed elsewhere (managed services often use ``extensions``).
"""

from __future__ import annotations

from typing import Any

from psycopg import Cursor

from ratatoskr.storage.errors import StorageUnavailable

__all__ = ["ensure_vector_extension", "vector_extension", "vector_type_oid"]


def vector_extension(cur: Cursor[Any]) -> tuple[str, str] | None:
    """``(schema, version)`` of the installed ``vector`` extension, or None."""
    cur.execute(
        "SELECT n.nspname, e.extversion FROM pg_extension AS e"
        " JOIN pg_namespace AS n ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
    )
    row = cur.fetchone()
    return None if row is None else (str(row[0]), str(row[1]))


def vector_type_oid(cur: Cursor[Any], schema: str) -> int:
    """The OID of the ``vector`` type the extension in ``schema`` made (what a binary
    ``vector[]`` parameter names as its element type, see ``vector.py``).

    Raises StorageUnavailable when there is none."""
    cur.execute(
        "SELECT t.oid FROM pg_type AS t JOIN pg_namespace AS n ON n.oid = t.typnamespace"
        " WHERE n.nspname = %s AND t.typname = 'vector'",
        (schema,),
    )
    row = cur.fetchone()
    if row is None:
        raise StorageUnavailable("the pgvector type (vector) vanished from the server")
    return int(row[0])


def ensure_vector_extension(cur: Cursor[Any]) -> str:
    """The schema of the ``vector`` extension, creating the extension first when it is
    missing (inside the caller's migration transaction, under its advisory lock).

    Raises StorageUnavailable when it is missing and cannot be created here.
    """
    found = vector_extension(cur)
    if found is not None:
        return found[0]
    cur.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
    if cur.fetchone() is None:
        raise StorageUnavailable("the pgvector extension (vector) is not available on the server")
    cur.execute("CREATE EXTENSION vector")
    created = vector_extension(cur)
    if created is None:  # pragma: no cover - CREATE EXTENSION succeeded
        raise StorageUnavailable("the pgvector extension (vector) could not be created")
    return created[0]
