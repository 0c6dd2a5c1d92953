"""Declaring or dropping a filterable field on an existing SQLite file.

The filter columns live only in memory (the sidecar keeps none): the rows already
stored are indexed when the store opens, whether the index is mapped from the
sidecar, caught up from it, or rebuilt from SQLite. A field dropped from the
declaration is no longer advertised nor accepted, and the remaining fields still
filter exactly.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

from bifrost.context import DispatchContext
from bifrost.errors import InvalidArguments, InvalidFilter
from bifrost.memory.filters import validate_filter
from ratatoskr.memory import SqliteMemoryStore, open_memory_store, sidecar

DIM = 8
CTX = DispatchContext(actor="filter-reopen")
KINDS: list[Any] = ["note", "fact", 3, 3.5, None, ["note", "plan"], True]


def _record(i: int) -> dict[str, Any]:
    rng = random.Random(i)
    metadata: dict[str, Any] = {"rank": i % 7}
    if i % 11:  # every eleventh record has no kind at all
        metadata["kind"] = KINDS[i % len(KINDS)]
    return {
        "id": f"c{i:04d}",
        "embedding": [rng.uniform(-1, 1) for _ in range(DIM)],
        "scope": {"tenant": f"t{i % 3}"},
        "metadata": metadata,
    }


RECORDS = [_record(i) for i in range(400)]
FILTERS: list[dict[str, Any]] = [
    {"metadata.kind": "note"},
    {"metadata.kind": {"$in": [3, "fact"]}},
    {"metadata.kind": {"$ne": "note"}},
    {"metadata.kind": {"$exists": False}},
    {"metadata.kind": {"$gte": 3}},
    {"metadata.kind": None},
    {"metadata.kind": "note", "metadata.rank": {"$lt": 3}},
]


def _write(path: str, fields: list[str]) -> None:
    store = open_memory_store(path, embedding_dim=DIM, filterable_fields=fields)
    for start in range(0, len(RECORDS), 100):
        store.upsert_many(RECORDS[start : start + 100], idempotency_key=f"k{start}", ctx=CTX)
    store.delete_many(["c0005", "c0100"])  # holes in the layout
    store.close()


def _live() -> list[dict[str, Any]]:
    return [r for r in RECORDS if r["id"] not in ("c0005", "c0100")]


def _assert_exact(store: SqliteMemoryStore, fields: list[str]) -> None:
    """scan and search return exactly what the oracle passes, scoped and not."""
    for mf in FILTERS:
        if not set(mf) <= set(fields):
            continue
        oracle = validate_filter(mf, fields)
        assert oracle is not None
        for scope in (None, {"tenant": "t1"}):
            want = sorted(
                r["id"]
                for r in _live()
                if oracle.matches(r) and (scope is None or r["scope"]["tenant"] == "t1")
            )
            page = store.scan(scope_all=scope, metadata_filter=mf, limit=1000)
            assert [item["id"] for item in page["items"]] == want, (mf, scope)
            hits = store.search([1.0] * DIM, top_k=1000, scope_all=scope, metadata_filter=mf)
            assert sorted(h["chunk_id"] for h in hits) == want, (mf, scope)


@pytest.mark.parametrize("sidecar_kept", [True, False], ids=["sidecar", "rebuilt"])
def test_field_declared_on_an_existing_file(tmp_path: Path, sidecar_kept: bool) -> None:
    path = str(tmp_path / "memory.db")
    _write(path, [])
    if not sidecar_kept:
        os.remove(path + sidecar.SUFFIX)
    fields = ["metadata.kind", "metadata.rank"]
    store = open_memory_store(path, embedding_dim=DIM, filterable_fields=fields)
    try:
        assert store.describe_store()["filterable_metadata_fields"] == fields
        _assert_exact(store, fields)
    finally:
        store.close()


def test_field_declared_with_the_sidecar_behind(tmp_path: Path) -> None:
    """Writes after the last sidecar (another process's, then caught up at open) are
    indexed too."""
    path = str(tmp_path / "memory.db")
    _write(path, [])
    saved = path + sidecar.SUFFIX
    stale = Path(saved).read_bytes()
    store = open_memory_store(path, embedding_dim=DIM)
    store.upsert_many(
        [{**_record(7), "metadata": {"kind": "fact"}}], idempotency_key="late", ctx=CTX
    )
    store.close()
    Path(saved).write_bytes(stale)  # the sidecar from before that write: caught up at open
    RECORDS[7] = {**_record(7), "metadata": {"kind": "fact"}}
    try:
        fields = ["metadata.kind"]
        store = open_memory_store(path, embedding_dim=DIM, filterable_fields=fields)
        try:
            _assert_exact(store, fields)
            page = store.scan(metadata_filter={"metadata.kind": "fact"}, limit=1000)
            assert "c0007" in [item["id"] for item in page["items"]]
        finally:
            store.close()
    finally:
        RECORDS[7] = _record(7)


def test_field_removed_from_the_declaration(tmp_path: Path) -> None:
    path = str(tmp_path / "memory.db")
    _write(path, ["metadata.kind", "metadata.rank"])
    store = open_memory_store(path, embedding_dim=DIM, filterable_fields=["metadata.rank"])
    try:
        assert store.describe_store()["filterable_metadata_fields"] == ["metadata.rank"]
        with pytest.raises(InvalidFilter):
            store.scan(metadata_filter={"metadata.kind": "note"})
        with pytest.raises(InvalidFilter):
            store.search([1.0] * DIM, top_k=5, metadata_filter={"metadata.kind": "note"})
        page = store.scan(metadata_filter={"metadata.rank": {"$gt": 4}}, limit=1000)
        assert [i["id"] for i in page["items"]] == [
            r["id"] for r in _live() if r["metadata"]["rank"] > 4
        ]
    finally:
        store.close()
    store = open_memory_store(path, embedding_dim=DIM)  # no field left: v1
    try:
        assert store.describe_store()["filterable_metadata_fields"] == []
        with pytest.raises(InvalidArguments):
            store.scan(metadata_filter={"metadata.rank": 1})
        assert len(store.scan(limit=1000)["items"]) == len(_live())
    finally:
        store.close()
