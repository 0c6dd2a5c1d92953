"""The values of declared filterable fields as SQL expressions, and their indexes.

Every expression here reads ``record_json`` (text) through :data:`DOC`, the record as
``jsonb``; the same expressions are the keys of the per-field indexes
(:func:`ensure_field_indexes`) and the terms of the filter predicate
(:mod:`ratatoskr.memory.postgres.filters`), so the planner matches one to the other.

- :data:`DOC` parses ``record_json`` after mapping the escapes ``\\u0000`` and
  ``\\u0001`` to the stored form of ``ratatoskr.postgres.text`` (U+0000 → U+0001
  U+0001, U+0001 → U+0001 U+0002): ``jsonb`` cannot hold NUL, and a plain cast of a
  record holding one fails. The mapping is injective and keeps code-point order, so
  an operand mapped the same way (:func:`ratatoskr.postgres.text.to_db`) compares
  exactly. Escaped backslashes are set aside first (as U+0002, which JSON text never
  holds raw: control characters are always escaped), so ``\\\\u0000`` — a backslash
  and the letters ``u0000`` — is left alone. Records without either escape (the
  ``strpos`` test; all real ones) are cast as they are.
- :func:`value` is the field's value by ``->`` per path part: SQL NULL when a part is
  missing or the path runs through a non-object (``->`` with a text key reads only
  objects), exactly bifrost's ``lookup``.
- :func:`number` and :func:`string` are the value as ``numeric`` / ``text``
  ``COLLATE "C"`` when it is of that JSON type, else NULL (no cast of another type
  is ever evaluated: ``CASE``).
- :func:`json_value` is the value as ``json``: a number keeps the text it was written
  with (``jsonb`` keeps only its ``numeric``), which tells an int from a float where
  the filter needs it (big numbers, see the filter module); no index reads it.

Indexes, per declared field, made when a store opens with the field declared (the
existing rows are indexed then, under the table's SHARE lock: writes wait for the
build, reads do not): a btree on :func:`value` and the tenant (``$eq``/``$in`` of a
value that is not an array: ``jsonb`` equality, exact, so its rows need no
re-check; with the tenant, a filter inside one tenant — what nearly every grant
makes of a search — finds exactly its rows in one index scan), a GIN
(``jsonb_path_ops``) on it over the rows where it is an array (containment of an
element), and btrees on :func:`number` and :func:`string` (the range operators).
Their statistics (ANALYZE gathers them for index expressions) let the planner
take a selective filter's index and leave an unselective one to the scope's.
Opening a store with no declared field costs nothing here. An index of a field no
longer declared stays (it costs its upkeep on writes; drop it by hand). Index names
derive from a hash of the field, never from its text; the field's text reaches SQL
only as literals.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import Cursor, sql

from bifrost.fields import field_path
from ratatoskr.postgres import StorageUnavailable
from ratatoskr.postgres.database import PostgresDatabase
from ratatoskr.postgres.migrations import MIGRATION_LOCK
from ratatoskr.postgres.text import to_db

__all__ = [
    "DOC",
    "ensure_field_indexes",
    "field_indexes",
    "is_array",
    "json_value",
    "literal",
    "number",
    "string",
    "value",
]

_RECORD = sql.Identifier("record_json")
_NEEDS_MAPPING = sql.SQL("strpos({r}, {e}) > 0").format(r=_RECORD, e=sql.Literal("\\u000"))
_MAPPED = sql.SQL(
    "replace(replace(replace(replace({r}, {bs}, {p}), {one}, {one_s}), {nul}, {nul_s}), {p}, {bs})"
).format(
    r=_RECORD,
    bs=sql.Literal("\\\\"),
    p=sql.Literal("\x02"),
    one=sql.Literal("\\u0001"),
    one_s=sql.Literal("\\u0001\\u0002"),
    nul=sql.Literal("\\u0000"),
    nul_s=sql.Literal("\\u0001\\u0001"),
)


def literal(x: Any) -> sql.SQL:
    """``x`` as an SQL literal with its ``%`` doubled: the statements holding these
    expressions are run with parameters (psycopg reads ``%`` as a placeholder), the
    index DDL with none (an empty tuple), so each reads ``%%`` as ``%``."""
    return sql.SQL(sql.Literal(x).as_string(None).replace("%", "%%"))


def _rendered(expr: sql.Composable) -> sql.SQL:
    """``expr`` rendered once (its literals escaped): composing it again on every
    filtered statement cost about a millisecond a search."""
    return sql.SQL(expr.as_string(None))


_TEXT = sql.SQL("(CASE WHEN {needs} THEN {mapped} ELSE {r} END)").format(
    needs=_NEEDS_MAPPING, mapped=_MAPPED, r=_RECORD
)
DOC = _rendered(sql.SQL("({}::jsonb)").format(_TEXT))
# The record as ``json``: its numbers keep the text they were written with (an int's
# has no '.' and no exponent), which ``jsonb`` (numeric) loses.
_DOC_JSON = _rendered(sql.SQL("({}::json)").format(_TEXT))
# Rendered expressions kept per declared path (the operator's list: bounded).
_PATHS = 256


def _at(doc: sql.Composable, path: tuple[str, ...]) -> sql.Composable:
    out = doc
    for part in path:
        out = sql.SQL("({} -> {})").format(out, literal(to_db(part)))
    return _rendered(out)


@functools.lru_cache(maxsize=_PATHS)
def value(path: tuple[str, ...]) -> sql.Composable:
    """The value at ``path`` (SQL NULL when missing or behind a non-object)."""
    return _at(DOC, path)


@functools.lru_cache(maxsize=_PATHS)
def json_value(path: tuple[str, ...]) -> sql.Composable:
    """The value at ``path`` as ``json`` (its text as written; NULL as for :func:`value`)."""
    return _at(_DOC_JSON, path)


def is_array(v: sql.Composable) -> sql.Composable:
    """Whether ``v`` is a JSON array (the array index's predicate)."""
    return sql.SQL("(jsonb_typeof({}) = 'array')").format(v)


@functools.lru_cache(maxsize=_PATHS)
def number(path: tuple[str, ...]) -> sql.Composable:
    """The value as ``numeric`` when it is a JSON number, else NULL."""
    v = value(path)
    return _rendered(
        sql.SQL("(CASE WHEN jsonb_typeof({v}) = 'number' THEN ({v})::numeric END)").format(v=v)
    )


@functools.lru_cache(maxsize=_PATHS)
def string(path: tuple[str, ...]) -> sql.Composable:
    """The value as ``text`` when it is a JSON string, else NULL (collate it "C")."""
    v = value(path)
    return _rendered(
        sql.SQL("(CASE WHEN jsonb_typeof({v}) = 'string' THEN {v} #>> '{{}}' END)").format(v=v)
    )


_NOT_OWNER = (
    "a newly declared filterable field needs its indexes, and only the role that owns"
    " the memory table may create them: open the store once as that role"
    " (SQLSTATE 42501)"
)


def _name(table: str, field: str, kind: str) -> str:
    digest = hashlib.sha256(field.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{table}_f{digest}_{kind}"


def field_indexes(table: str, fields: Sequence[str]) -> list[tuple[str, sql.Composable]]:
    """``(index name, key definition)`` of every index of ``fields`` (a name is unique
    within the table's schema; the key follows ``ON table``)."""
    out: list[tuple[str, sql.Composable]] = []
    for field in fields:
        path = field_path(field)
        v = value(path)
        out += [
            (_name(table, field, "eqt"), sql.SQL("(({}), tenant)").format(v)),
            (
                _name(table, field, "arr"),
                sql.SQL("USING gin (({v}) jsonb_path_ops) WHERE {arr}").format(
                    v=v, arr=is_array(v)
                ),
            ),
            (_name(table, field, "num"), sql.SQL("(({}))").format(number(path))),
            (_name(table, field, "str"), sql.SQL('(({}) COLLATE "C")').format(string(path))),
        ]
    return out


def ensure_field_indexes(db: PostgresDatabase, table: str, fields: Sequence[str]) -> None:
    """Create the missing indexes of ``fields`` on ``table`` of ``db``'s schema.

    A read finds what exists (no lock when nothing is missing); the rest is built in
    one transaction under the migration lock, so concurrent opens build each once.
    Raises StorageUnavailable (naming the fix) when the role does not own the table,
    and what :meth:`PostgresDatabase.run` raises."""
    wanted = field_indexes(table, fields)
    if not wanted:
        return
    names = [name for name, _key in wanted]
    present_sql = sql.SQL(
        "SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = ANY(%s)"
    )

    def present(cur: Cursor[Any]) -> set[str]:
        return {str(r[0]) for r in cur.execute(present_sql, (db.schema, names)).fetchall()}

    found = db.run(present, mode="snapshot")
    if found >= set(names):
        return

    def create(cur: Cursor[Any]) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        try:
            for name, key in wanted:
                create_sql = sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} {key}").format(
                    i=sql.Identifier(name), t=db.table(table), key=key
                )
                cur.execute(create_sql, ())  # () : "%%" is read as "%" (see literal)
        except psycopg.errors.InsufficientPrivilege:
            raise StorageUnavailable(_NOT_OWNER) from None

    db.run(create, mode="write", bound="none")
