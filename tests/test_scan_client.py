"""The Python clients' ``scan``, ``scan_all`` and filtered ``search`` against a real
``ratatoskr serve`` over loopback HTTP, with one declared filterable field.

A tenant's walk in pages of 4 returns each of its records exactly once, in
``chunk_id`` order, never another tenant's; a filter narrows scan and search to
exactly the records the oracle passes; the async client walks the same pages; an
unknown scope axis is refused before anything is sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from bifrost.client import AsyncBifrostClient, BifrostClient
from bifrost.errors import InvalidArguments, InvalidFilter
from ratatoskr.provider.testing import ServerProcess, free_port

from .conftest import KEY, start_server

DIM = 8
KINDS = ("note", "fact", "plan")


@pytest.fixture(scope="module")
def scan_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp: Path = tmp_path_factory.mktemp("scan")
    env = {
        "RATATOSKR_MEMORY_DB": str(tmp / "memory.db"),
        "RATATOSKR_AFFECT_DB": str(tmp / "affect.db"),
        "RATATOSKR_VMP_DB": str(tmp / "vmp.db"),
        "RATATOSKR_MEMORY_EMBEDDING_DIM": str(DIM),
        "RATATOSKR_HEIMDALL_KEY": KEY,
        "RATATOSKR_VMP_API_KEY": "e2e-vmp-key-0123456789",
        "RATATOSKR_PORT": "0",
        "RATATOSKR_MEMORY_FILTERABLE_FIELDS": "metadata.kind",
    }
    server = start_server(["serve"], env, tmp)
    try:
        for tenant, count in (("t", 25), ("u", 5)):
            with _client(server, tenant) as c:
                c.upsert_many([_chunk(tenant, i) for i in range(count)])
        yield server
    finally:
        server.stop()
        server.close()


def _client(server: ServerProcess, tenant: str) -> BifrostClient:
    return BifrostClient(
        server.url("memory"), KEY.encode(), actor="wt", scope={"tenant": tenant}, plane="memory"
    )


def _chunk(tenant: str, i: int) -> dict[str, Any]:
    embedding = [0.0] * DIM
    embedding[i % DIM] = 1.0
    embedding[(i + 3) % DIM] = 0.5 + i / 100
    return {
        "id": f"{tenant}-{i:03d}",
        "embedding": embedding,
        "scope": {"tenant": tenant, "end_user": f"e{i % 2}"},
        "content": f"chunk {i}",
        "metadata": {"kind": KINDS[i % 3]},
    }


def _ids(tenant: str, count: int, keep: Any = lambda i: True) -> list[str]:
    return [f"{tenant}-{i:03d}" for i in range(count) if keep(i)]


def test_scan_pages_and_scan_all(scan_server: ServerProcess) -> None:
    with _client(scan_server, "t") as c:
        assert c.describe_store()["filterable_metadata_fields"] == ["metadata.kind"]
        first = c.scan(limit=4)
        assert [r["id"] for r in first["items"]] == _ids("t", 4)
        assert first["next_after_id"] == "t-003"
        assert all(r["revision"] == 1 and r["scope"]["tenant"] == "t" for r in first["items"])
        last = c.scan(limit=4, after_id="t-020")
        assert [r["id"] for r in last["items"]] == ["t-021", "t-022", "t-023", "t-024"]
        assert last["next_after_id"] is None
        walked = list(c.scan_all(page_size=4))
        assert [r["id"] for r in walked] == _ids("t", 25)  # the grant: never u's records
        assert walked[7] == {**_chunk("t", 7), "revision": 1}
        bare = list(c.scan_all(page_size=7, include={"embedding": False}, after_id="t-010"))
        assert [r["id"] for r in bare] == [f"t-{i:03d}" for i in range(11, 25)]
        assert all("embedding" not in r for r in bare)


def test_filter_on_scan_and_search(scan_server: ServerProcess) -> None:
    with _client(scan_server, "t") as c:
        facts = list(c.scan_all(metadata_filter={"metadata.kind": "fact"}, page_size=2))
        assert [r["id"] for r in facts] == _ids("t", 25, lambda i: i % 3 == 1)
        mixed = c.scan(
            scope_all={"end_user": "e0"},
            metadata_filter={"metadata.kind": {"$in": ["note", "plan"]}},
            limit=100,
        )
        assert [r["id"] for r in mixed["items"]] == _ids(
            "t", 25, lambda i: i % 2 == 0 and i % 3 != 1
        )
        assert mixed["next_after_id"] is None
        hits = c.search(
            _chunk("t", 4)["embedding"], top_k=50, metadata_filter={"metadata.kind": "fact"}
        )
        assert sorted(h["chunk_id"] for h in hits) == _ids("t", 25, lambda i: i % 3 == 1)
        assert hits[0]["chunk_id"] == "t-004"
        with pytest.raises(InvalidFilter):
            c.scan(metadata_filter={"metadata.colour": "red"})
        with pytest.raises(InvalidFilter):
            c.search([1.0] * DIM, top_k=1, metadata_filter={"content": "x"})
        with pytest.raises(InvalidArguments):
            c.scan(limit=0)


def test_async_scan_all_walks_the_same_pages(scan_server: ServerProcess) -> None:
    async def walk() -> tuple[list[str], dict[str, Any]]:
        async with AsyncBifrostClient(
            scan_server.url("memory"),
            KEY.encode(),
            actor="wt",
            scope={"tenant": "u"},
            plane="memory",
        ) as c:
            ids = [r["id"] async for r in c.scan_all(page_size=2)]
            page = await c.scan(metadata_filter={"metadata.kind": "note"})
            return ids, page

    ids, page = anyio.run(walk)
    assert ids == _ids("u", 5)
    assert [r["id"] for r in page["items"]] == ["u-000", "u-003"]
    assert page["next_after_id"] is None


def test_unknown_axis_refused_before_sending() -> None:
    # Nothing listens on this port: a request would fail with a connection error.
    url = f"http://127.0.0.1:{free_port()}/memory"
    with BifrostClient(url, KEY.encode(), actor="wt", plane="memory") as c:
        with pytest.raises(InvalidFilter):
            c.scan(scope_all={"planet": "p"})
        with pytest.raises(InvalidFilter):
            next(c.scan_all(scope_any=[{"tenant": "t"}, {"planet": "p"}]))
