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

__all__ = ["to_document", "to_records"]

# Where the plane reads a record's id from, in order (records other clients wrote too).
_ID_KEYS = ("id", "chunk_id", "memory_id")


def to_records(
    ns: IdNamespace,
    scope: Mapping[str, str],
    texts: Sequence[str],
    vectors: Sequence[Sequence[float]],
    metadatas: Sequence[Mapping[str, Any]] | None,
    ids: Sequence[str | None] | None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The records of ``texts`` and their store ids (generated where ``ids`` has None).
    Raises ValueError when the lengths differ or an id is repeated, TypeError for a
    text or metadata of the wrong type."""
    n = len(texts)
    for name, given in (("metadatas", metadatas), ("ids", ids), ("embeddings", vectors)):
        if given is not None and len(given) != n:
            raise ValueError(f"{len(given)} {name} for {n} texts: one each, or none")
    records: list[dict[str, Any]] = []
    doc_ids: list[str] = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] is {type(text).__name__}, not a string")
        metadata = metadatas[i] if metadatas is not None else {}
        if not isinstance(metadata, Mapping):
            raise TypeError(f"metadatas[{i}] is {type(metadata).__name__}, not a dict")
        chunk_id = ns.chunk_id(ids[i] if ids is not None else None)
        doc_ids.append(ns.doc_id(chunk_id))
        records.append(
            {
                "id": chunk_id,
                "embedding": [float(x) for x in vectors[i]],
                "scope": dict(scope),
                "content": text,
                "metadata": dict(metadata),
            }
        )
    if len(set(doc_ids)) != n:
        raise ValueError("ids repeat within one call: each document needs its own id")
    return records, doc_ids


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
