"""How a LangChain ``Document`` is kept as a memory-plane record, and read back.

A document becomes ``{"id": <chunk id>, "embedding": [...], "scope": <the store's
scope>, "content": page_content, "metadata": metadata}``: the metadata kept verbatim
as one object (so its keys never meet the record's own ``id``, ``scope`` or the
reserved ``revision``), filterable as ``metadata.<key>`` on a server that declares
those fields. A record another client wrote under the scope reads back with its
``content`` (else its ``distillate``) as page content and its ``metadata`` object
(else ``{}``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.documents import Document

from langchain_ratatoskr.ids import IdNamespace

__all__ = ["chunk_ids", "to_document", "to_records"]

# Where the plane reads a record's id from, in order (records other clients wrote too).
_ID_KEYS = ("id", "chunk_id", "memory_id")


def chunk_ids(
    ns: IdNamespace,
    texts: Sequence[str],
    metadatas: Sequence[Mapping[str, Any]] | None,
    ids: Sequence[str | None] | None,
) -> list[str]:
    """The chunk ids ``texts`` are written under (fresh ones where ``ids`` has None),
    after checking the call's shape, before anything is embedded. Raises ValueError
    when the lengths differ or an id repeats or is too long, TypeError for a text,
    metadata or id of the wrong type."""
    n = len(texts)
    for name, given in (("metadatas", metadatas), ("ids", ids)):
        if given is not None and len(given) != n:
            raise ValueError(f"{len(given)} {name} for {n} texts: one each, or none")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] is {type(text).__name__}, not a string")
        if metadatas is not None and not isinstance(metadatas[i], Mapping):
            raise TypeError(f"metadatas[{i}] is {type(metadatas[i]).__name__}, not a dict")
    out = [ns.chunk_id(ids[i] if ids is not None else None) for i in range(n)]
    if len(set(out)) != n:
        raise ValueError("ids repeat within one call: each document needs its own id")
    return out


def to_records(
    scope: Mapping[str, str],
    ids: Sequence[str],
    texts: Sequence[str],
    vectors: Sequence[Sequence[float]],
    metadatas: Sequence[Mapping[str, Any]] | None,
) -> list[dict[str, Any]]:
    """The records of ``texts`` (checked by :func:`chunk_ids`) under chunk ids ``ids``."""
    if len(vectors) != len(texts):
        raise ValueError(f"the embedder gave {len(vectors)} vectors for {len(texts)} texts")
    return [
        {
            "id": chunk_id,
            "embedding": [float(x) for x in vectors[i]],
            "scope": dict(scope),
            "content": texts[i],
            "metadata": dict(metadatas[i]) if metadatas is not None else {},
        }
        for i, chunk_id in enumerate(ids)
    ]


def to_document(ns: IdNamespace, record: Mapping[str, Any]) -> Document:
    """The ``Document`` a stored record (or a search row's ``chunk``) reads as."""
    chunk_id = next((record[k] for k in _ID_KEYS if isinstance(record.get(k), str)), "")
    text = record.get("content")
    if not isinstance(text, str):
        text = record.get("distillate")
    metadata = record.get("metadata")
    return Document(
        id=ns.doc_id(chunk_id),
        page_content=text if isinstance(text, str) else "",
        metadata=dict(metadata) if isinstance(metadata, Mapping) else {},
    )
