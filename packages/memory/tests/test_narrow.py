"""Float32-exact embeddings stored as float32 (migration 7): which embeddings take the
float32 blob, which keep float64 or JSON, that each reads back bit for bit (get, search,
scan, export/import), and that a v6 file upgrades in place with its rows narrowed."""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import pytest

from bifrost.context import DispatchContext
from bifrost.portability import validate_chunk_import
from ratatoskr.memory import RatatoskrMemoryStore, open_memory_store, records
from ratatoskr.memory.schema import PLANE, migrations
from ratatoskr.sqlite import Database, MetaSetting, StorageError

from .conftest import DIM, NO_FSYNC
from .test_erase import leaked
from .test_records import exact
from .test_schema import columns, v1_records
from .v1_file import write_v1_file

SUB32 = float(np.float32(1e-45))  # 2**-149, the smallest float32 subnormal
# id -> (embedding, the form it is stored in)
EMBEDDINGS: dict[str, tuple[list[Any], str]] = {
    "f32": (np.linspace(-1, 1, DIM, dtype=np.float32).tolist(), "f32"),
    "f32 neg zero": ([-0.0, 0.0, 0.5, -0.25, 3.0, 0.0, -0.0, 1.0], "f32"),
    "f32 subnormal": ([SUB32, -SUB32, 1.0, 0.0, 0.0, 0.0, 0.0, 2.0**-126], "f32"),
    "f32 extremes": ([float(np.finfo(np.float32).max), -1.0, *[0.0] * (DIM - 2)], "f32"),
    "f64 digits": ([0.1, 0.2, 1 / 3, 1.0, 0.0, 0.0, 0.0, 2.0], "f64"),
    "f64 one element": ([*[0.5] * (DIM - 1), 0.1], "f64"),
    "f64 beyond range": ([1e308, 1.0, *[0.0] * (DIM - 2)], "f64"),
    "f64 subnormal": ([5e-324, 1.0, *[0.0] * (DIM - 2)], "f64"),
    "f64 tiny normal": ([1e-40, 1.0, *[0.0] * (DIM - 2)], "f64"),  # a float32 subnormal, inexact
    "ints": ([1, 0, 2, -3, 0, 0, 0, 7], "json"),
    "mixed": ([1, 0.5, -0.0, 2, 0.25, 0, 1.0, 3], "json"),
}


def recs(field: str = "embedding") -> list[dict[str, Any]]:
    return [
        {"id": cid, field: list(emb), "scope": {"tenant": "t"}, "note": cid, "neg0": -0.0}
        for cid, (emb, _) in EMBEDDINGS.items()
    ]


def forms(conn: apsw.Connection) -> dict[str, tuple[str | None, int | None, int | None]]:
    """chunk_id -> (embedding_key, bytes of the float64 blob, bytes of the float32 blob;
    None before migration 7)."""
    return {
        str(cid): (
            None if key is None else str(key),
            None if f64 is None else len(f64),
            None if f32 is None else len(f32),
        )
        for cid, key, f64, f32 in conn.execute(
            "SELECT chunk_id, embedding_key, embedding_f64,"
            f" {'embedding_f32' if 'embedding_f32' in columns(conn) else 'NULL'} FROM memory_chunks"
        )
    }


def want_form(form: str, field: str) -> tuple[str | None, int | None, int | None]:
    return {
        "f32": (field, None, 4 * DIM),
        "f64": (field, 8 * DIM, None),
        "json": (None, None, None),
    }[form]


def check_exact(store: RatatoskrMemoryStore, written: list[dict[str, Any]], rev: int = 1) -> None:
    ids = [r["id"] for r in written]
    assert exact(store.get_many(ids)) == exact([{**r, "revision": rev} for r in written])
    by_id = {r["id"]: r for r in written}
    for row in store.search([1.0] * DIM, top_k=len(ids)):
        assert exact(row["chunk"]) == exact(by_id[row["chunk_id"]])


def test_narrow_rows_is_bit_exact() -> None:
    m = np.array(
        [
            [0.5, -0.0, SUB32, 3.0],
            [0.1, 0.5, 0.5, 0.5],  # 0.1 is not a float32
            [1e39, 0.0, 0.0, 1.0],  # beyond float32's range
            [-0.0, -0.0, -0.0, 1.0],
        ]
    )
    out = records.narrow_rows(m)
    assert out[1] is None and out[2] is None
    assert out[0] == struct.pack("<4f", 0.5, -0.0, SUB32, 3.0)
    assert out[3] is not None
    assert [math.copysign(1, x) for x in struct.unpack("<4f", out[3])] == [-1, -1, -1, 1]


@pytest.mark.parametrize("field", ["embedding", "vector"])
def test_each_embedding_takes_its_form_and_reads_back_exactly(
    store: RatatoskrMemoryStore, ctx: DispatchContext, field: str
) -> None:
    written = recs(field)
    store.upsert_many(written, idempotency_key="k", ctx=ctx)
    with store.database.read() as conn:
        got = forms(conn)
    assert got == {cid: want_form(form, field) for cid, (_, form) in EMBEDDINGS.items()}
    check_exact(store, written)
    # The float32 blob is the embedding's own values, readable with struct alone.
    with store.database.read() as conn:
        blob = conn.execute(
            "SELECT embedding_f32 FROM memory_chunks WHERE chunk_id = 'f32 neg zero'"
        ).fetchall()[0][0]
    values = struct.unpack(f"<{DIM}f", blob)  # type: ignore[arg-type]
    assert exact(list(values)) == exact(EMBEDDINGS["f32 neg zero"][0])


def test_an_update_moves_a_chunk_between_forms(
    store: RatatoskrMemoryStore, ctx: DispatchContext
) -> None:
    first = recs()
    store.upsert_many(first, idempotency_key="a", ctx=ctx)
    # Each chunk takes the next one's embedding: every form changes to another.
    embs = [r["embedding"] for r in first]
    second = [{**r, "embedding": embs[(i + 1) % len(embs)]} for i, r in enumerate(first)]
    store.upsert_many(second, idempotency_key="b", ctx=ctx)
    with store.database.read() as conn:
        got = forms(conn)
    kinds = [form for _, form in EMBEDDINGS.values()]
    assert [got[r["id"]] for r in second] == [
        want_form(kinds[(i + 1) % len(kinds)], "embedding") for i in range(len(second))
    ]
    check_exact(store, second, rev=2)


def test_export_then_import_keeps_every_form(tmp_path: Path, ctx: DispatchContext) -> None:
    src = open_memory_store(str(tmp_path / "a.db"), embedding_dim=DIM, options=NO_FSYNC)
    written = recs()
    src.upsert_many(written, idempotency_key="k", ctx=ctx)
    page, _ = src.export_page(None, 100, {})
    src.close()
    dst = open_memory_store(str(tmp_path / "b.db"), embedding_dim=DIM, options=NO_FSYNC)
    entries = [{"record": c.record, "revision": c.revision, "written_at": 5.0} for c in page]
    dst.import_chunks(validate_chunk_import(entries, embedding_dim=DIM, max_batch=1000), "fail")
    with dst.database.read() as conn:
        got = forms(conn)
    assert got == {cid: want_form(form, "embedding") for cid, (_, form) in EMBEDDINGS.items()}
    check_exact(dst, written)
    dst.close()


def open_at(path: str, version: int) -> Database:
    """The file at ``path`` opened (upgraded) to schema ``version`` and no further."""
    return Database(
        path,
        plane=PLANE,
        migrations=migrations(DIM)[:version],
        meta={"embedding_dim": MetaSetting(str(DIM), "embedding_dim")},
        options=NO_FSYNC,
    )


def schema_objects(conn: apsw.Connection) -> list[tuple[str, str]]:
    return [
        (str(t), str(n))
        for t, n in conn.execute(
            "SELECT type, name FROM sqlite_schema WHERE tbl_name = 'memory_chunks' ORDER BY 1, 2"
        )
    ]


def test_a_v6_file_upgrades_with_its_float32_exact_rows_narrowed(tmp_path: Path) -> None:
    path = str(tmp_path / "v6.db")
    old = v1_records() + recs()  # 2,500+ rows: the narrowed ones in the third copy batch
    write_v1_file(path, old, dim=DIM)
    db = open_at(path, 6)
    with db.read() as conn:
        assert "embedding_f32" not in columns(conn)
        before_forms = forms(conn)
        objects = schema_objects(conn)
        quota = conn.execute("SELECT * FROM memory_quota ORDER BY 1").fetchall()
        rowids = conn.execute("SELECT chunk_id, rowid FROM memory_chunks ORDER BY 1").fetchall()
    db.close()
    assert before_forms["f32"] == ("embedding", 8 * DIM, None)  # float64 at v6

    store = open_memory_store(path, embedding_dim=DIM, options=NO_FSYNC)
    assert store.database.schema_version() == len(migrations(DIM)) == 7
    with store.database.read() as conn:
        got = forms(conn)
        assert schema_objects(conn) == objects  # indexes and quota triggers kept
        assert conn.execute("SELECT * FROM memory_quota ORDER BY 1").fetchall() == quota
        assert (
            conn.execute("SELECT chunk_id, rowid FROM memory_chunks ORDER BY 1").fetchall()
            == rowids
        )
    for cid, (_, form) in EMBEDDINGS.items():
        assert got[cid] == want_form(form, "embedding")
    for cid, (key, f64, _) in before_forms.items():  # v1 rows: random floats, or JSON
        if cid not in EMBEDDINGS:
            assert got[cid] == (key, f64, None)
    for start in range(0, len(old), 1000):
        part = old[start : start + 1000]
        got_back = store.get_many([r["id"] for r in part])
        assert exact(got_back) == exact([{**r, "revision": 1} for r in part])
    # The quota triggers are live on the rebuilt table.
    store.upsert_many(
        [{"id": "new", "embedding": [0.5] * DIM, "scope": {"tenant": "t9"}}],
        idempotency_key="n",
        ctx=DispatchContext(actor="a"),
    )
    with store.database.read() as conn:
        assert conn.execute("SELECT items FROM memory_quota WHERE tenant = 't9'").fetchall() == [
            (1,)
        ]
    store.close()


def test_the_upgrade_rolls_back_whole_on_a_bad_row(tmp_path: Path) -> None:
    path = str(tmp_path / "v6.db")
    write_v1_file(path, v1_records() + recs(), dim=DIM)
    open_at(path, 6).close()
    # A row no v6 write makes (a key without its blob): v7's table refuses to copy it.
    conn = apsw.Connection(path)
    conn.execute("PRAGMA ignore_check_constraints = ON")
    conn.execute("UPDATE memory_chunks SET embedding_key = 'embedding' WHERE chunk_id = 'ints'")
    before = conn.execute("SELECT * FROM memory_chunks ORDER BY rowid").fetchall()
    conn.close()
    with pytest.raises(StorageError):
        open_memory_store(path, embedding_dim=DIM, options=NO_FSYNC)
    db = open_at(path, 6)
    assert db.schema_version() == 6
    with db.read() as c:
        assert "embedding_f32" not in columns(c)
        assert not c.table_exists(None, "memory_chunks_v7")
        assert c.execute("SELECT * FROM memory_chunks ORDER BY rowid").fetchall() == before
    db.close()


def test_an_erased_float32_chunk_leaves_no_bytes_of_its_embedding(
    db_file: str, ctx: DispatchContext
) -> None:
    s = open_memory_store(db_file, embedding_dim=DIM)
    rng = np.random.default_rng(7)
    emb = rng.uniform(1.0, 2.0, DIM).astype(np.float32)  # distinctive float32 bytes
    others = [
        {"id": f"o{i}", "embedding": rng.uniform(-1, 1, DIM).tolist(), "scope": {"tenant": "t"}}
        for i in range(30)
    ]
    victim = {"id": "v", "embedding": emb.tolist(), "scope": {"tenant": "t"}}
    s.upsert_many([*others, victim], idempotency_key="k", ctx=ctx)
    assert s.database.erasure.flush()  # the pages are in memory.db itself
    needle = emb.astype("<f4").tobytes()
    assert "memory.db" in leaked(db_file, needle)
    assert s.delete_many(["v"]) == {"deleted": 1}
    assert s.database.erasure.flush()
    assert leaked(db_file, needle) == []
    s.close()
    assert leaked(db_file, needle) == []
