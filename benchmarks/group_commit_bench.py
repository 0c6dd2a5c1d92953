"""Group commit: chunks/s with 1, 2, 4 and 8 concurrent writers, group commit off and on.

One run, side by side, on fresh files in one directory (``--dir``, default the
system temp dir; the disk that is measured):

- **commit floor**: a loop of tiny committed transactions (one row each, WAL,
  ``synchronous=FULL``): the fsyncs/s of this disk, the most commits/s any
  writer can get;
- **SQLite alone**: a bare apsw loop inserting the rows one memory upsert of 100
  chunks stores (its ``memory_chunks`` and ``memory_vec`` rows, made beforehand by
  the store's own code) into a memory store's own schema, one transaction and one
  fsync per batch: the store's work without validation, ledger, checks or index;
- **in-process**: writers are threads calling ``upsert_many`` (memory, batches of
  100 chunks of 384 dims) or ``put_many`` (affect, batches of 100 records) on one
  store, ``group_commit`` off (every batch its own COMMIT: the old behaviour) and on;
- **over HTTP**: a real ``ratatoskr serve`` (``RATATOSKR_GROUP_COMMIT`` false / true,
  ``--workers`` as given), writers are client threads posting prepared bodies with
  their tokens (made before the timed loop).

Every writer writes its own new ids (no conflicts); each configuration gets a fresh
file. Targets (issue 28): 8 writers ≥ 3× one writer's chunks/s; one writer ≥ 0.8×
SQLite alone.

    .venv/bin/python benchmarks/group_commit_bench.py [--batches 96] [--http-workers 1,2]
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from benchlib import machine_line, ratatoskr_server

from bifrost.client import build_envelope, mint_token
from bifrost.context import DispatchContext
from bifrost.memory.validation import validate_upsert
from ratatoskr.affect import open_affect_store
from ratatoskr.memory import open_memory_store
from ratatoskr.memory import records as stored_records
from ratatoskr.sqlite import ConnectionOptions, codec, connect

DIM = 384
BATCH = 100
WRITERS = (1, 2, 4, 8)
CTX = DispatchContext(actor="group-bench")
KEY_HEX = secrets.token_hex(32)
KEY = KEY_HEX.encode()  # the provider uses the setting's text as the key
VERB = {"memory": "upsert_many", "affect": "put_many"}


def memory_batch(w: int, b: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    vecs = rng.standard_normal((BATCH, DIM))
    return [
        {
            "id": f"w{w}-b{b}-{i}",
            "embedding": vecs[i].tolist(),
            "scope": {"tenant": f"t{w}"},
            "content": "x" * 200,
        }
        for i in range(BATCH)
    ]


def affect_batch(w: int, b: int) -> list[dict[str, Any]]:
    return [
        {
            "key": f"w{w}-b{b}-{i}",
            "scope": {"tenant": f"t{w}"},
            "valence": 0.25,
            "labels": ["calm"],
        }
        for i in range(BATCH)
    ]


def run_writers(writers: int, per_writer: int, call: Callable[[int, int], Any]) -> float:
    """``call(writer, batch)`` for every batch of every writer, writers on threads of
    their own started together; the wall time."""
    barrier = threading.Barrier(writers + 1)
    errors: list[BaseException] = []

    def work(w: int) -> None:
        barrier.wait()
        try:
            for b in range(per_writer):
                call(w, b)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return elapsed


# -- floors -----------------------------------------------------------------------------------


def commit_floor(directory: Path, seconds: float = 2.0) -> float:
    """Tiny committed transactions per second (WAL, synchronous=FULL)."""
    path = str(directory / "floor.db")
    conn = connect(path, ConnectionOptions())
    conn.execute("CREATE TABLE t (n INTEGER)")
    n = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (?)", (n,))
        conn.execute("COMMIT")
        n += 1
    rate = n / (time.perf_counter() - start)
    conn.close()
    return rate


def write_floor(directory: Path, seconds: float = 2.0, size: int = 1 << 20) -> float:
    """MB/s of ``size``-byte appends each made durable (write + fdatasync): what a commit
    that writes that many bytes to the WAL pays for them on this disk."""
    path = directory / "bandwidth.bin"
    block = os.urandom(size)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    n = 0
    start = time.perf_counter()
    try:
        while time.perf_counter() - start < seconds:
            os.write(fd, block)
            os.fdatasync(fd)
            n += 1
    finally:
        os.close(fd)
        path.unlink()
    return n * size / 1e6 / (time.perf_counter() - start)


def wal_bytes_per_chunk(directory: Path) -> float:
    """Bytes one memory upsert of 100 chunks appends to the WAL, per chunk."""
    path = directory / "wal-probe.db"
    store = open_memory_store(str(path), embedding_dim=DIM)
    rng = np.random.default_rng(3)
    try:
        store.upsert_many(memory_batch(0, 0, rng), idempotency_key="w0", ctx=CTX)
        before = os.path.getsize(f"{path}-wal")
        store.upsert_many(memory_batch(0, 1, rng), idempotency_key="w1", ctx=CTX)
        return (os.path.getsize(f"{path}-wal") - before) / BATCH
    finally:
        store.close()


def sqlite_alone(directory: Path, batches: int) -> float:
    """Chunks/s of bare apsw inserting one upsert's rows per transaction."""
    path = str(directory / "alone.db")
    open_memory_store(path, embedding_dim=DIM).close()
    rng = np.random.default_rng(7)
    prepared: list[tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]] = []
    for b in range(batches):
        request = validate_upsert(
            memory_batch(0, b, rng), None, f"k{b}", None, embedding_dim=DIM, max_batch=BATCH
        )
        forms, units = stored_records.stored_forms(request.items, DIM)
        now = time.time()
        chunks, vecs = [], []
        for chunk, form, unit, size in zip(
            request, forms, units, request.record_sizes(), strict=True
        ):
            scope_json = codec.dumps(dict(sorted(chunk.scope.items())))
            stored = (
                form.record_json,
                form.embedding_key,
                form.embedding_f64,
                form.embedding_f32,
                size,
            )
            chunks.append((chunk.id, *stored, 1, scope_json, None, b + 1, now))
            vecs.append((chunk.id, unit.tobytes()))
        prepared.append((chunks, vecs))
    conn = connect(path, ConnectionOptions(load_vec=True))
    start = time.perf_counter()
    for chunks, vecs in prepared:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO memory_chunks (chunk_id, record_json, embedding_key, embedding_f64,"
            " embedding_f32, record_bytes, revision, scope_json, origin, seq, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            chunks,
        )
        conn.executemany("INSERT INTO memory_vec (chunk_id, embedding) VALUES (?, ?)", vecs)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return batches * BATCH / elapsed


# -- in-process -------------------------------------------------------------------------------


def in_process(
    plane: str, directory: Path, writers: int, batches: int, group: bool
) -> tuple[float, float]:
    """(chunks/s, batches per COMMIT) of ``writers`` threads on one store."""
    per_writer = batches // writers
    options = ConnectionOptions(group_commit=group)
    path = str(directory / f"{plane}-{writers}-{group}-{uuid.uuid4().hex[:8]}.db")
    rng = np.random.default_rng(writers)
    if plane == "memory":
        store: Any = open_memory_store(path, embedding_dim=DIM, options=options)
        data = [[memory_batch(w, b, rng) for b in range(per_writer)] for w in range(writers)]
        store.upsert_many(memory_batch(99, 0, rng), idempotency_key="warm", ctx=CTX)

        def call(w: int, b: int) -> Any:
            return store.upsert_many(data[w][b], idempotency_key=f"{w}-{b}", ctx=CTX)
    else:
        store = open_affect_store(path, options=options)
        data = [[affect_batch(w, b) for b in range(per_writer)] for w in range(writers)]
        store.put_many(affect_batch(99, 0), idempotency_key="warm", ctx=CTX)

        def call(w: int, b: int) -> Any:
            return store.put_many(data[w][b], idempotency_key=f"{w}-{b}", ctx=CTX)

    g = store.database.group
    g0 = (g.groups, g.batches) if g is not None else (0, 0)
    try:
        elapsed = run_writers(writers, per_writer, call)
    finally:
        per_commit = (g.batches - g0[1]) / max(1, g.groups - g0[0]) if g is not None else 1.0
        store.close()
    return writers * per_writer * BATCH / elapsed, per_commit


# -- over HTTP --------------------------------------------------------------------------------


def prepared_calls(
    plane: str, writers: int, per_writer: int
) -> list[list[tuple[bytes, dict[str, str]]]]:
    rng = np.random.default_rng(writers + 100)
    verb = "upsert_many" if plane == "memory" else "put_many"
    out = []
    for w in range(writers):
        calls = []
        for b in range(per_writer):
            recs = memory_batch(w, b, rng) if plane == "memory" else affect_batch(w, b)
            body = build_envelope(verb, {"records": recs}, idempotency_key=str(uuid.uuid4()))
            token = mint_token(
                KEY,
                plane=plane,
                verb=verb,
                body=body,
                actor="group-bench",
                scope={},
                lifetime_s=240,
            )
            calls.append(
                (body, {"authorization": f"Bearer {token}", "content-type": "application/json"})
            )
        out.append(calls)
    return out


def over_http(
    plane: str, directory: Path, writers: int, batches: int, group: bool, workers: int
) -> float:
    per_writer = batches // writers
    sub = directory / f"http-{plane}-{writers}-{group}-{workers}-{uuid.uuid4().hex[:8]}"
    sub.mkdir()
    env = {
        **os.environ,
        "RATATOSKR_MEMORY_DB": str(sub / "memory.db"),
        "RATATOSKR_AFFECT_DB": str(sub / "affect.db"),
        "RATATOSKR_VMP_DB": str(sub / "vmp.db"),
        "RATATOSKR_MEMORY_EMBEDDING_DIM": str(DIM),
        "RATATOSKR_HEIMDALL_KEY": KEY_HEX,
        "RATATOSKR_LOG_LEVEL": "warning",
        "RATATOSKR_GROUP_COMMIT": "true" if group else "false",
    }
    env.pop("RATATOSKR_WORKERS", None)
    url_path = f"/{plane}/bifrost/{plane}-call"
    with ratatoskr_server(["--workers", str(workers)], env, str(sub)) as server:
        calls = prepared_calls(plane, writers, per_writer)
        clients = [
            httpx.Client(base_url=server.base_url, trust_env=False, timeout=120)
            for _ in range(writers)
        ]
        try:
            for c in clients:  # open each keep-alive connection outside the timed loop
                c.get("/healthz")

            def call(w: int, b: int) -> None:
                body, headers = calls[w][b]
                r = clients[w].post(url_path, content=body, headers=headers)
                if r.status_code != 200:
                    raise RuntimeError(f"{plane} write answered {r.status_code}: {r.text[:200]}")

            elapsed = run_writers(writers, per_writer, call)
        finally:
            for c in clients:
                c.close()
    return writers * per_writer * BATCH / elapsed


def clean(directory: Path) -> None:
    """Remove the files of finished configurations (the disk stays as free as it was)."""
    for entry in directory.iterdir():
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


# -- report -----------------------------------------------------------------------------------


def table(title: str, rows: Sequence[tuple[int, float, float, str]]) -> None:
    one_off, one_on = rows[0][1], rows[0][2]
    print(f"\n{title}\n")
    print(
        "| writers | group commit off (chunks/s) | on (chunks/s) | on ÷ off"
        " | on ÷ one writer on | batches per COMMIT (on) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for writers, off, on, per in rows:
        print(
            f"| {writers} | {off:,.0f} | {on:,.0f} | {on / off:.2f}× | {on / one_on:.2f}× | {per} |"
        )
    del one_off


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=96, help="batches per configuration")
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--http-workers", default="1,2", help="'' for no HTTP runs")
    parser.add_argument("--planes", default="memory,affect")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each, the best kept")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="group-bench-", dir=args.dir))
    planes = [p for p in args.planes.split(",") if p]
    try:
        print(
            f"machine: {machine_line()}; {args.batches} batches of {BATCH} per configuration;"
            f" load average at start {os.getloadavg()[0]:.1f}"
        )
        floor = commit_floor(directory)
        print(
            f"commit floor: {floor:,.0f} tiny commits/s"
            f" (at batch {BATCH}, one commit each: {floor * BATCH:,.0f} chunks/s at best)"
        )
        bandwidth = write_floor(directory)
        per_chunk = wal_bytes_per_chunk(directory)
        print(
            f"durable write bandwidth: {bandwidth:,.0f} MB/s (1 MiB appends + fdatasync);"
            f" a memory upsert appends {per_chunk / 1024:,.1f} KiB per chunk to the WAL:"
            f" at most {bandwidth * 1e6 / per_chunk:,.0f} chunks/s, however many commits"
        )
        alone = sqlite_alone(directory, args.batches)
        print(f"SQLite alone (memory rows, one writer, one fsync per batch): {alone:,.0f} chunks/s")
        for plane in planes:
            rows = []
            for writers in WRITERS:
                offs, ons = [], []
                for _ in range(args.repeat):  # alternating, the best of each
                    offs.append(in_process(plane, directory, writers, args.batches, False))
                    ons.append(in_process(plane, directory, writers, args.batches, True))
                on, per = max(ons)
                rows.append((writers, max(offs)[0], on, f"{per:.1f}"))
                clean(directory)
            table(f"{plane}, in-process ({VERB[plane]}, batches of {BATCH})", rows)
            if plane == "memory":
                print(f"\none writer, group commit on ÷ SQLite alone: {rows[0][2] / alone:.2f}×")
        for workers in [int(w) for w in args.http_workers.split(",") if w]:
            for plane in planes:
                rows = []
                for writers in WRITERS:
                    off = max(
                        over_http(plane, directory, writers, args.batches, False, workers)
                        for _ in range(args.repeat)
                    )
                    on = max(
                        over_http(plane, directory, writers, args.batches, True, workers)
                        for _ in range(args.repeat)
                    )
                    rows.append((writers, off, on, "–"))
                    clean(directory)
                table(f"{plane}, over HTTP (`ratatoskr serve --workers {workers}`)", rows)
        print(f"\nload average at the end: {os.getloadavg()[0]:.1f} (a quiet host: < 1)")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
