"""The id namespace: a stable per-scope prefix, mapped back on the way out."""

from __future__ import annotations

import uuid

import pytest
from langchain_ratatoskr.ids import MAX_CHUNK_ID_BYTES, IdNamespace


def test_prefix_is_stable_per_scope_and_differs_between_scopes() -> None:
    a = IdNamespace({"tenant": "acme", "end_user": "ada"})
    again = IdNamespace({"end_user": "ada", "tenant": "acme"})  # key order does not matter
    b = IdNamespace({"tenant": "globex", "end_user": "ada"})
    assert a.chunk_id("1") == again.chunk_id("1")
    assert a.chunk_id("1") != b.chunk_id("1")
    assert IdNamespace({}).chunk_id("1") not in (a.chunk_id("1"), b.chunk_id("1"))
    # the scope's values never appear in the chunk id
    assert "acme" not in a.chunk_id("1") and "ada" not in a.chunk_id("1")


def test_ids_map_back_and_foreign_ids_pass_through() -> None:
    ns = IdNamespace({"tenant": "acme"})
    for doc_id in ("1", "", "a.b.c", "lc.x.y", "ünï"):
        assert ns.doc_id(ns.chunk_id(doc_id)) == doc_id
        assert ns.owns(ns.chunk_id(doc_id))
    other = IdNamespace({"tenant": "globex"}).chunk_id("1")
    assert not ns.owns(other) and ns.doc_id(other) == other
    assert ns.doc_id("worldtree-chunk-7") == "worldtree-chunk-7"


def test_generated_ids_are_uuid4() -> None:
    ns = IdNamespace({})
    first, second = ns.doc_id(ns.chunk_id(None)), ns.doc_id(ns.chunk_id(None))
    assert first != second
    assert uuid.UUID(first).version == 4


def test_too_long_and_non_string_ids_are_refused() -> None:
    ns = IdNamespace({"tenant": "acme"})
    room = MAX_CHUNK_ID_BYTES - len(ns.prefix)
    assert len(ns.chunk_id("x" * room).encode()) == MAX_CHUNK_ID_BYTES
    with pytest.raises(ValueError, match=f"at most {room} bytes"):
        ns.chunk_id("x" * (room + 1))
    with pytest.raises(ValueError, match="at most"):
        ns.chunk_id("é" * (room // 2 + 1))  # counted in UTF-8 bytes
    with pytest.raises(TypeError, match="strings, got int"):
        ns.chunk_id(1)  # type: ignore[arg-type]
