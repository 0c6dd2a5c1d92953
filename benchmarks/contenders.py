"""One contender of the side-by-side benchmark, in a process of its own.

``compare.py`` runs this file once per contender and phase, so that each
contender's memory is its own (peak RSS is this process's ``VmHWM``) and a
reopen really starts cold:

    python contenders.py build --contender NAME --data DIR --n N --store DIR --out FILE
    python contenders.py serve --contender NAME --data DIR --n N --store DIR --out FILE

``build`` upserts the first N chunks of the data set in batches of 100 and times
each batch call; ``serve`` opens the store built before (timing the open and the
first search), runs every search mode and reports latencies, the row numbers it
got back (recall is computed by the caller) and its peak RSS.

It imports only the standard library and numpy at the top: the LangGraph
contender runs under a different interpreter (Debian's python3, which can load
SQLite extensions) from its own venv. Each contender's library is imported
inside its own functions.
"""

# Each contender imports its library inside its own functions (see above).
# ruff: noqa: PLC0415
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

TOP_K = 10
BATCH = 100
MODES = ("unfiltered", "tenant", "group")  # 100%, 1%, 10% of the chunks


# -- the data set (written by compare.py) ------------------------------------------------


class Data:
    def __init__(self, root: str, n: int) -> None:
        self.root = Path(root)
        self.n = n
        self.vectors = np.load(self.root / "vectors.npy", mmap_mode="r")[:n]
        self.tenant_of = np.arange(n) % 100
        self.user_of = (np.arange(n) // 100) % 10
        self.group_of = self.tenant_of // 10
        self.bulk_until = 0
        self.in_bulk = False
        self.loaded = n  # rows the store holds (fewer after a time-boxed build)
        self.budget = 0.0  # seconds of loading (0: all N); see batches()
        self.load_began = time.perf_counter()
        self.load_s = 0.0

    def chunk_id(self, i: int) -> str:
        return f"c{i:07d}"

    @staticmethod
    def row_of(chunk_id: str) -> int:
        return int(chunk_id[1:])

    def scope(self, i: int) -> dict[str, str]:
        t = int(self.tenant_of[i])
        return {
            "group": f"g{t // 10}",
            "tenant": f"t{t:02d}",
            "end_user": f"u{t:02d}-{int(self.user_of[i])}",
        }

    def content(self, i: int) -> str:
        return f"Turn {i}: the user asked about the schedule and the agent answered. " * 2

    def distillate(self, i: int) -> str:
        return f"note {i}: prefers morning meetings"

    def queries(self, mode: str) -> tuple[np.ndarray, np.ndarray]:
        q = np.load(self.root / f"q-{self.n}-{mode}.npy")
        s = np.load(self.root / f"s-{self.n}-{mode}.npy")
        return q, s

    def batches(self, bulk_size: int = BATCH) -> Iterator[range]:
        """Rows below ``bulk_until`` in the contender's bulk batches (not timed), the
        rest in batches of 100 (timed); ``in_bulk`` tells which the current one is.

        Time-boxed (``budget`` seconds from the first batch on, the library's import and
        setup not counted): once the bulk phase has used ``BULK_SHARE`` of it, the timed
        batches of 100 start at the row reached (as many as the timed phase would have
        had) and get the rest of the budget, at least ``(1 - BULK_SHARE) * budget``
        from there; no batch starts after that. The rows loaded are always a prefix:
        ``loaded`` counts the rows of the batches the caller finished (it asks for the
        next one only then).
        """
        start = 0
        end = self.n
        timed_rows = self.n - self.bulk_until
        self.loaded = 0
        self.load_began = time.perf_counter()
        deadline = self.load_began + self.budget if self.budget else None
        bulk_deadline = self.load_began + self.budget * BULK_SHARE if self.budget else None
        while start < end:
            now = time.perf_counter()
            bulk = start < self.bulk_until
            if bulk and bulk_deadline is not None and now > bulk_deadline:
                self.bulk_until = start
                end = min(end, start + timed_rows)
                bulk = False
                if deadline is not None:
                    deadline = max(deadline, now + self.budget * (1 - BULK_SHARE))
            if deadline is not None and now > deadline:
                break
            self.in_bulk = bulk
            size = bulk_size if bulk else BATCH
            stop = min(end, start + size, self.bulk_until if bulk else end)
            yield range(start, stop)
            start = self.loaded = stop
        self.load_s = time.perf_counter() - self.load_began
        self.in_bulk = False


# Of a time-boxed build's budget, the share its bulk phase may use (the rest: the
# timed batches of 100 at the size reached).
BULK_SHARE = 0.85


def scope_filter(mode: str, sel: int) -> dict[str, str] | None:
    if mode == "tenant":
        return {"tenant": f"t{sel:02d}"}
    if mode == "group":
        return {"group": f"g{sel}"}
    return None


def written_bytes() -> int:
    """Bytes this process (every thread) has caused to be written to storage so far:
    ``write_bytes`` of ``/proc/self/io``, counted when a page is dirtied, so a WAL
    append, a checkpoint's copy into the database and a file rewrite all count,
    whenever the kernel later writes them back. -1 where the kernel does not say."""
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


def vmhwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- contenders: each gives build(data, store_dir, timed) and open(store_dir) -> search --
#
# search(q: list[float], q32: np.ndarray, mode, sel, qid) -> list of row numbers, best first.

Search = Callable[[list[float], np.ndarray, str, int, str], list[int]]


def _ratatoskr_record(data: Data, i: int) -> dict[str, Any]:
    return {
        "id": data.chunk_id(i),
        "embedding": data.vectors[i].tolist(),
        "scope": data.scope(i),
        "content": data.content(i),
        "distillate": data.distillate(i),
        "origin": "conversation",
    }


def ratatoskr_build(data: Data, store: str, timed: Callable[..., Any]) -> dict[str, Any]:
    from bifrost.context import DispatchContext
    from ratatoskr.memory import open_memory_store

    ctx = DispatchContext(actor="bench", plane="memory", verb="upsert_many")
    s = open_memory_store(os.path.join(store, "memory.db"), embedding_dim=data.vectors.shape[1])
    for b, rows in enumerate(data.batches(1000)):  # 1000 = the store's max_batch
        records = [_ratatoskr_record(data, i) for i in rows]
        timed(lambda r=records, k=f"b{b}": s.upsert_many(r, idempotency_key=k, ctx=ctx))
    s.close()
    return {}


def ratatoskr_open(data: Data, store: str) -> tuple[Search, Callable[[], None]]:
    from ratatoskr.memory import open_memory_store

    s = open_memory_store(os.path.join(store, "memory.db"), embedding_dim=data.vectors.shape[1])

    def search(q: list[float], q32: np.ndarray, mode: str, sel: int, qid: str) -> list[int]:
        hits = s.search(
            q, top_k=TOP_K, scope_all=scope_filter(mode, sel), include={"embedding": False}
        )
        return [Data.row_of(h["chunk_id"]) for h in hits]

    return search, s.close


_REFERENCE: dict[str, Any] = {}


def reference_build(data: Data, store: str, timed: Callable[..., Any]) -> dict[str, Any]:
    """The reference InMemoryMemoryStore has no file: build and serve in one process."""
    from bifrost.consumer.testing import InMemoryMemoryStore
    from bifrost.context import DispatchContext

    ctx = DispatchContext(actor="bench", plane="memory", verb="upsert_many")
    ref = _REFERENCE["store"] = InMemoryMemoryStore(data.vectors.shape[1])
    for b, rows in enumerate(data.batches()):
        records = [_ratatoskr_record(data, i) for i in rows]
        timed(lambda r=records, k=f"b{b}": ref.upsert_many(r, idempotency_key=k, ctx=ctx))
    return {}


def reference_open(data: Data, store: str) -> tuple[Search, Callable[[], None]]:
    s = _REFERENCE["store"]

    def search(q: list[float], q32: np.ndarray, mode: str, sel: int, qid: str) -> list[int]:
        hits = s.search(
            q, top_k=TOP_K, scope_all=scope_filter(mode, sel), include={"embedding": False}
        )
        return [Data.row_of(h["chunk_id"]) for h in hits]

    return search, lambda: None


def numpy_build(data: Data, store: str, timed: Callable[..., Any]) -> dict[str, Any]:
    """numpy keeps its matrix as a .npy file: "upsert" is not measured."""
    np.save(os.path.join(store, "matrix.npy"), np.asarray(data.vectors, dtype=np.float32))
    return {"skip_upsert": True}


def numpy_open(data: Data, store: str) -> tuple[Search, Callable[[], None]]:
    raw = np.load(os.path.join(store, "matrix.npy"))
    matrix = (raw / np.linalg.norm(raw, axis=1, keepdims=True)).astype(np.float32)
    rows = {
        "tenant": {t: np.nonzero(data.tenant_of == t)[0] for t in range(100)},
        "group": {g: np.nonzero(data.group_of == g)[0] for g in range(10)},
    }

    def search(q: list[float], q32: np.ndarray, mode: str, sel: int, qid: str) -> list[int]:
        qn = q32 / np.float32(np.linalg.norm(q32))
        if mode == "unfiltered":
            idx = None
            scores = matrix @ qn
        else:
            idx = rows[mode][sel]
            scores = matrix[idx] @ qn
        top = np.argpartition(-scores, TOP_K - 1)[:TOP_K]
        top = top[np.argsort(-scores[top])]
        found: list[int] = (top if idx is None else idx[top]).tolist()
        return found

    return search, lambda: None


def chroma_client(store: str) -> Any:
    import chromadb
    from chromadb.config import Settings

    return chromadb.PersistentClient(
        path=os.path.join(store, "chroma"), settings=Settings(anonymized_telemetry=False)
    )


def chroma_build(data: Data, store: str, timed: Callable[..., Any]) -> dict[str, Any]:
    client = chroma_client(store)
    col = client.create_collection(
        "bench", configuration={"hnsw": {"space": "cosine"}}, embedding_function=None
    )
    for rows in data.batches(5000):  # under Chroma's max_batch_size (5461 here)
        ids = [data.chunk_id(i) for i in rows]
        emb = np.asarray(data.vectors[rows.start : rows.stop], dtype=np.float32)
        metas = [data.scope(i) for i in rows]
        docs = [data.content(i) for i in rows]
        timed(
            lambda ids=ids, emb=emb, metas=metas, docs=docs: col.add(
                ids=ids, embeddings=emb, metadatas=metas, documents=docs
            )
        )
    return {}


def chroma_open(data: Data, store: str) -> tuple[Search, Callable[[], None]]:
    client = chroma_client(store)
    col = client.get_collection("bench", embedding_function=None)

    def search(q: list[float], q32: np.ndarray, mode: str, sel: int, qid: str) -> list[int]:
        res = col.query(
            query_embeddings=[q32],
            n_results=TOP_K,
            where=scope_filter(mode, sel),
            include=["documents", "metadatas", "distances"],
        )
        return [Data.row_of(i) for i in res["ids"][0]]

    return search, lambda: None


def file_states(root: str) -> dict[str, tuple[int, int]]:
    """Every file under ``root``: (size, mtime in ns)."""
    out: dict[str, tuple[int, int]] = {}
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            st = os.stat(path)
            out[path] = (st.st_size, st.st_mtime_ns)
    return out


def sync_changed(root: str, before: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """fsync every file under ``root`` that is new or changed since ``before``, then
    the directories holding them (so the new names are durable too); the new states."""
    now = file_states(root)
    folders: set[str] = set()
    for path, state in now.items():
        if before.get(path) != state:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            folders.add(os.path.dirname(path))
    for folder in folders:
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return now


def _lance_schema(dim: int) -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("id", pa.string()),
            pa.field("vector", pa.list_(pa.float32(), dim)),
            pa.field("group", pa.string()),
            pa.field("tenant", pa.string()),
            pa.field("end_user", pa.string()),
            pa.field("content", pa.string()),
        ]
    )


LANCE_INDEX_FROM = 1_000_000


def lancedb_build(data: Data, store: str, timed: Callable[..., Any]) -> dict[str, Any]:
    import lancedb
    import pyarrow as pa

    dim = data.vectors.shape[1]
    db = lancedb.connect(os.path.join(store, "lance"))
    schema = _lance_schema(dim)
    table = db.create_table("bench", schema=schema)
    lance_dir = os.path.join(store, "lance")
    seen = file_states(lance_dir)
    synced: list[float] = []
    for rows in data.batches(100_000):  # LanceDB wants big appends
        if not data.in_bulk and not synced:
            seen = file_states(lance_dir)  # the bulk phase's files are not this add's
        emb = np.asarray(data.vectors[rows.start : rows.stop], dtype=np.float32)
        scopes = [data.scope(i) for i in rows]
        batch = pa.Table.from_arrays(
            [
                pa.array([data.chunk_id(i) for i in rows]),
                pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), dim),
                pa.array([s["group"] for s in scopes]),
                pa.array([s["tenant"] for s in scopes]),
                pa.array([s["end_user"] for s in scopes]),
                pa.array([data.content(i) for i in rows]),
            ],
            schema=schema,
        )
        timed(lambda b=batch: table.add(b))
        if not data.in_bulk:
            # What a durable add would also cost: LanceDB's adds do not fsync (4
            # fdatasync calls in 21 adds under strace), so the files this add wrote and
            # their directories are synced here, timed apart (ratatoskr's rate includes
            # its commit's fsync).
            t_sync = time.perf_counter()
            seen = sync_changed(lance_dir, seen)
            synced.append(time.perf_counter() - t_sync)
    # What LanceDB's docs recommend once the data is in: compact the small
    # fragments, scalar indexes on the filter columns, and an ANN index (IVF_PQ,
    # "if your vector search frequently includes metadata filters") only past
    # ~1M rows: "for datasets around 100K rows or fewer ... a vector index is
    # usually unnecessary overhead" — below that its search is a flat, exact scan.
    t0 = time.perf_counter()
    table.optimize()
    t1 = time.perf_counter()
    table.create_scalar_index("tenant", index_type="BITMAP")
    table.create_scalar_index("group", index_type="BITMAP")
    t2 = time.perf_counter()
    out: dict[str, Any] = {"optimize_s": t1 - t0, "scalar_index_s": t2 - t1, "fsync_s": synced}
    if data.loaded >= LANCE_INDEX_FROM:
        # Time-boxed like the load (IVF_PQ over 250k rows took 140 s on these 2 shared
        # cores, so ~9 min at 1M): past the budget the build is abandoned (nothing is
        # committed: the process exits without waiting for it) and the table is
        # searched without it, LanceDB's flat exact scan; the report says which.
        done = threading.Event()

        def index() -> None:
            try:
                table.create_index(
                    metric="cosine", vector_column_name="vector", index_type="IVF_PQ"
                )
                Path(store, LANCE_ANN_MARK).write_text("IVF_PQ")
            finally:
                done.set()

        threading.Thread(target=index, daemon=True).start()
        if done.wait(data.budget or None):
            out["vector_index_s"] = time.perf_counter() - t2
        else:
            out["vector_index_abandoned_s"] = data.budget
    return out


LANCE_ANN_MARK = "lance-ann-index"  # written once LanceDB's IVF_PQ index exists


def lancedb_open(data: Data, store: str) -> tuple[Search, Callable[[], None]]:
    import lancedb

    db = lancedb.connect(os.path.join(store, "lance"))
    table = db.open_table("bench")
    indexed = Path(store, LANCE_ANN_MARK).exists()

    def search(q: list[float], q32: np.ndarray, mode: str, sel: int, qid: str) -> list[int]:
        query = table.search(q32).distance_type("cosine").limit(TOP_K)
        if indexed:  # as in LanceDB's own ANN examples
            query = query.nprobes(20).refine_factor(10)
        f = scope_filter(mode, sel)
        if f:
            (key, value), *_ = f.items()
            query = query.where(f"{key} = '{value}'", prefilter=True)
        rows = query.select(["id", "content"]).to_arrow()
        return [Data.row_of(i) for i in rows.column("id").to_pylist()]

    return search, lambda: None


_LG_VECTORS: dict[str, list[float]] = {}


def _lg_embed(texts: list[str]) -> list[list[float]]:
    """Precomputed embeddings: the indexed field holds a key into the vectors."""
    return [_LG_VECTORS[t] for t in texts]


def _lg_store(store: str, dim: int) -> Any:
    import sqlite3

    from langgraph.store.sqlite import SqliteStore

    conn = sqlite3.connect(
        os.path.join(store, "langgraph.db"), check_same_thread=False, isolation_level=None
    )
    # IndexConfig names the embedded field "fields"; this SqliteStore release reads
    # "text_fields" (else it embeds the whole value): both are given.
    index = {"dims": dim, "embed": _lg_embed, "fields": ["text"], "text_fields": ["text"]}
    s = SqliteStore(conn, index=index)
    s.setup()
    return s, conn


def langgraph_build(data: Data, store: str, timed: Callable[..., Any]) -> dict[str, Any]:
    from langgraph.store.base import PutOp

    s, conn = _lg_store(store, data.vectors.shape[1])
    for rows in data.batches(1000):
        ops = []
        for i in rows:
            key = data.chunk_id(i)
            _LG_VECTORS[key] = data.vectors[i].tolist()
            sc = data.scope(i)
            ops.append(
                PutOp(
                    namespace=(sc["group"], sc["tenant"], sc["end_user"]),
                    key=key,
                    value={
                        "text": key,
                        "content": data.content(i),
                        "distillate": data.distillate(i),
                    },
                )
            )
        timed(lambda ops=ops: s.batch(ops))
        _LG_VECTORS.clear()
    conn.close()
    return {}


def langgraph_open(data: Data, store: str) -> tuple[Search, Callable[[], None]]:
    s, conn = _lg_store(store, data.vectors.shape[1])

    def search(q: list[float], q32: np.ndarray, mode: str, sel: int, qid: str) -> list[int]:
        _LG_VECTORS[qid] = q
        if mode == "tenant":
            prefix: tuple[str, ...] = (f"g{sel // 10}", f"t{sel:02d}")
        elif mode == "group":
            prefix = (f"g{sel}",)
        else:
            prefix = ()
        items = s.search(prefix, query=qid, limit=TOP_K)
        _LG_VECTORS.pop(qid, None)
        return [Data.row_of(it.key) for it in items]

    return search, conn.close


CONTENDERS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "ratatoskr": (ratatoskr_build, ratatoskr_open),
    "reference": (reference_build, reference_open),
    "numpy": (numpy_build, numpy_open),
    "chroma": (chroma_build, chroma_open),
    "lancedb": (lancedb_build, lancedb_open),
    "langgraph": (langgraph_build, langgraph_open),
}


# -- phases ----------------------------------------------------------------------------


def do_build(args: argparse.Namespace, data: Data) -> dict[str, Any]:
    build, _ = CONTENDERS[args.contender]
    spent: list[float] = []
    bulk: list[float] = []
    written = [0]  # bytes written to storage during the timed batches
    data.bulk_until = max(0, data.n - args.timed_upserts) if args.timed_upserts else 0

    def timed(fn: Callable[[], Any]) -> Any:
        in_bulk = data.in_bulk
        w0 = written_bytes()
        t0 = time.perf_counter()
        value = fn()
        (bulk if in_bulk else spent).append(time.perf_counter() - t0)
        if not in_bulk and w0 >= 0:
            written[0] += written_bytes() - w0
        return value

    os.makedirs(args.store, exist_ok=True)
    data.budget = args.build_budget
    t0 = time.perf_counter()
    extra = build(data, args.store, timed)
    wall = time.perf_counter() - t0
    return {
        "batch_s": spent,
        "timed_write_bytes": written[0] if written_bytes() >= 0 else None,
        "bulk_s": sum(bulk),
        "bulk_rows": min(data.bulk_until, data.loaded),
        "loaded": data.loaded,
        "load_s": data.load_s,
        "build_budget_s": args.build_budget,
        "build_wall_s": wall,
        **extra,
    }


IMPORTS = {
    "ratatoskr": ["ratatoskr.memory"],
    "chroma": ["chromadb"],
    "lancedb": ["lancedb", "pyarrow"],
    "langgraph": ["langgraph.store.sqlite", "langgraph.store.base"],
}


def do_serve(args: argparse.Namespace, data: Data) -> dict[str, Any]:
    _, opener = CONTENDERS[args.contender]
    for module in IMPORTS.get(args.contender, []):  # the library's import is not the reopen
        importlib.import_module(module)
    q0, s0 = data.queries("unfiltered")
    t0 = time.perf_counter()
    search, close = opener(data, args.store)
    open_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    search(q0[0].tolist(), q0[0], "unfiltered", int(s0[0]), "first")
    out: dict[str, Any] = {"open_s": open_s, "first_search_s": time.perf_counter() - t0}
    out["modes"] = {}
    for mode in MODES:
        qs, sels = data.queries(mode)
        if args.queries:
            qs, sels = qs[: args.queries], sels[: args.queries]
        qlists = [q.tolist() for q in qs]
        out["modes"][mode] = timed_queries(
            lambda j, tag, m=mode, ql=qlists, q=qs, s=sels: search(  # type: ignore[misc]
                ql[j], q[j], m, int(s[j]), f"{tag}{m}{j}"
            ),
            len(qs),
            args.mode_budget,
            args.min_queries,
        )
    out["vmhwm_mb"] = vmhwm_mb()
    close()
    return out


def timed_queries(
    search: Callable[[int, str], list[int]], count: int, budget: float, min_queries: int
) -> dict[str, Any]:
    """Up to ``count`` timed searches, bounded: after ``min_queries`` none starts once
    ``budget`` seconds (0: no bound) have gone by; so a slow contender answers fewer
    queries in the mode (how many is what the report shows). Up to three warm-up
    searches come first (fewer if they take a quarter of the budget)."""
    began = time.perf_counter()
    for j in range(min(3, count)):  # warm this mode's path
        search(j, "w")
        if budget and time.perf_counter() - began > budget / 4:
            break
    times: list[float] = []
    rows: list[list[int]] = []
    began = time.perf_counter()
    for j in range(count):
        if j >= min_queries and budget and time.perf_counter() - began > budget:
            break
        t = time.perf_counter()
        got = search(j, "q")
        times.append(time.perf_counter() - t)
        rows.append(got)
    return {"times": times, "rows": rows, "planned": count}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("phase", choices=["build", "serve", "both"])
    parser.add_argument("--contender", required=True, choices=sorted(CONTENDERS))
    parser.add_argument("--data", required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--queries", type=int, default=0, help="cap on queries per mode")
    parser.add_argument("--mode-budget", type=float, default=0, help="seconds per search mode")
    parser.add_argument(
        "--min-queries", type=int, default=10, help="queries per mode before the budget counts"
    )
    parser.add_argument(
        "--timed-upserts", type=int, default=0, help="time only the last K chunks (0: all)"
    )
    parser.add_argument(
        "--build-budget", type=float, default=0, help="seconds of loading (0: load all N)"
    )
    parser.add_argument(
        "--loaded", type=int, default=0, help="serve: rows a time-boxed build loaded"
    )
    args = parser.parse_args()
    data = Data(args.data, args.n)
    if args.loaded:
        data.loaded = args.loaded
    result: dict[str, Any] = {"contender": args.contender, "n": args.n}
    if args.phase in ("build", "both"):
        result["build"] = do_build(args, data)
    if args.phase in ("serve", "both"):
        result["serve"] = do_serve(args, data)
    Path(args.out).write_text(json.dumps(result))
    if result.get("build", {}).get("vector_index_abandoned_s"):
        os._exit(0)  # an abandoned index build is still running: do not wait for it
    return 0


if __name__ == "__main__":
    sys.exit(main())
