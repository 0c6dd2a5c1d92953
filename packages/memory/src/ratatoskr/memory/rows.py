"""Chunk rows read by id: a write's heads (revision and stored scope, for its grant
and revision checks), the stored rows a get or a search returns (undecoded), and the
``scope_json`` column text of a scope."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

import apsw

from ratatoskr.memory import changes
from ratatoskr.memory.records import StoredChunk
from ratatoskr.sqlite import codec

__all__ = ["chunks", "fetch", "fetch_at", "heads", "placeholders", "scope_json"]

_SQL_CHUNK = 500


def chunks(items: Sequence[str], size: int = _SQL_CHUNK) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def placeholders(n: int) -> str:
    return ",".join("?" * n)


def heads(
    conn: apsw.Connection, ids: Sequence[str]
) -> tuple[dict[str, int], dict[str, dict[str, str]]]:
    """The revision and the stored scope of each of ``ids`` that exists, in one read
    per part (a write reads them in its transaction: the grant and revision checks)."""
    revisions: dict[str, int] = {}
    scopes: dict[str, dict[str, str]] = {}
    parsed: dict[str, dict[str, str]] = {}
    for part in chunks(ids):
        for chunk_id, revision, scope_json in conn.execute(
            "SELECT chunk_id, revision, scope_json FROM memory_chunks"
            f" WHERE chunk_id IN ({placeholders(len(part))})",
            tuple(part),
        ):
            cid, text = str(chunk_id), str(scope_json)
            revisions[cid] = int(revision)
            # Chunks share few distinct scopes: each is parsed once.
            scope = parsed.get(text)
            if scope is None:
                scope = parsed[text] = codec.loads(text)
            scopes[cid] = scope
    return revisions, scopes


def fetch(conn: apsw.Connection, ids: Sequence[str]) -> dict[str, StoredChunk]:
    """Stored rows by id, undecoded: ``record_json`` is parsed when first used and
    the embedding blob is kept as bytes."""
    return fetch_at(conn, ids)[0]


def fetch_at(conn: apsw.Connection, ids: Sequence[str]) -> tuple[dict[str, StoredChunk], int]:
    """:func:`fetch`, and the change counter of the snapshot it read (from the
    same statement when a row came back, else read on its own)."""
    out: dict[str, StoredChunk] = {}
    at: int | None = None
    for part in chunks(ids):
        for chunk_id, record_json, key, blob, revision, seq, f32 in conn.execute(
            _fetch_sql(len(part)), tuple(part)
        ):
            out[str(chunk_id)] = StoredChunk(
                str(record_json),
                None if key is None else str(key),
                blob,
                int(revision),
                f32,
            )
            at = 0 if seq is None else int(seq)
    return out, changes.seq(conn) if at is None else at


@functools.lru_cache(maxsize=4096)
def scope_json(items: tuple[tuple[str, str], ...]) -> str:
    """The ``scope_json`` column of a scope given as its sorted items (chunks share
    few scopes: each is serialised once while it stays among the recent ones)."""
    return codec.dumps(dict(items))


@functools.cache
def _fetch_sql(n: int) -> str:
    """The fetch of ``n`` ids (made once per count: a search runs it every time, and
    the same text finds apsw's prepared statement)."""
    return (
        f"SELECT chunk_id, record_json, embedding_key, embedding_f64, revision, {changes.SEQ_SQL},"
        f" embedding_f32 FROM memory_chunks WHERE chunk_id IN ({placeholders(n)})"
    )
