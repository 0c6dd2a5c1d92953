"""Affect plane benchmark: the SQLite affect store at N keys × R revisions.

Measured in one process, against a file-backed store with the real durability
settings (WAL, synchronous=FULL):

- ``put_many`` in batches of 100 records: R passes over the N keys, pass r
  writing revision r of every key (so the last passes append to long
  histories); throughput in records/s and per-batch latency;
- ``get`` latency (p50/p95) of random keys;
- ``history`` latency of random keys: the default first page (limit 50, all R
  revisions) and a second keyset page (limit 3, ``before_revision``);
- ``list`` latency: the first page (limit 50) unfiltered, within one tenant of
  100 (1%), within a tenant + end user (0.1%), with ``scope_any`` over 3
  tenants, and a page deep in the key range (``after_key``);
- the database file size;
- the disk's own ceiling for the same bytes, side by side with ``put_many`` (each
  batch of ``put_many`` followed by the same batch through each, so a shared disk's
  other load falls on all alike): the same schema, pragmas (WAL, synchronous=FULL)
  and one transaction per batch through ``ratatoskr.sqlite``'s Database, writing
  rows made before the clock starts (the same history, current, scope-index and
  ledger rows, byte for byte) — SQLite and the disk alone; the same for schema v1's
  rows in a v1 file (the record in current and in history, an index b-tree under
  each) — what the layout alone was worth; and the commit floor (one ledger row per
  transaction: what a synchronous commit costs on this disk whatever it carries),
  each in a file of its own. ``--no-ceiling`` skips them;
- WAL pages per commit of every writer, per pass, counted by a WAL hook that also
  runs the autocheckpoint it replaces (a PASSIVE checkpoint once the WAL holds
  ``wal_autocheckpoint`` pages, as SQLite's own hook does).

Records look like Worldtree's affect state (~350 bytes of JSON): valence,
arousal, labels, an appraisal note; scopes are 100 tenants × 10 end users.

    .venv/bin/python benchmarks/affect_bench.py                                # small, seconds
    .venv/bin/python benchmarks/affect_bench.py --keys 100000 --revisions 10   # full
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import orjson

from bifrost.context import DispatchContext
from bifrost.timestamps import rfc3339
from ratatoskr.affect import RatatoskrAffectStore, open_affect_store
from ratatoskr.affect.schema import LEDGER, MIGRATIONS, PLANE
from ratatoskr.sqlite import Database, driver_versions

BATCH = 100
TENANTS = 100
USERS = 10
CTX = DispatchContext(actor="bench", plane="affect", verb="put_many")
LABELS = ["calm", "curious", "tense", "warm", "wary", "playful", "tired", "focused"]


def key_of(i: int) -> str:
    return f"agent-{i % 7:02d}/subject-{i:07d}"


def scope_of(i: int) -> dict[str, str]:
    t = i % TENANTS
    return {"tenant": f"tenant-{t:03d}", "end_user": f"user-{t:03d}-{(i // TENANTS) % USERS}"}


def record(i: int, revision: int) -> dict[str, Any]:
    rng = random.Random(i * 1_000 + revision)
    return {
        "key": key_of(i),
        "scope": scope_of(i),
        "valence": round(rng.uniform(-1, 1), 4),
        "arousal": round(rng.uniform(0, 1), 4),
        "dominance": round(rng.uniform(0, 1), 4),
        "labels": rng.sample(LABELS, 2),
        "appraisal": {
            "trigger": f"turn {revision} of session {i // 37}",
            "note": "the subject answered slowly and changed the topic twice " * 2,
            "confidence": round(rng.uniform(0.5, 1), 3),
        },
        "model": "worldtree-appraiser/2",
    }


def pct(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def latency(fn: Callable[[int], Any], samples: int, rng: random.Random, n: int) -> dict[str, float]:
    picks = [rng.randrange(n) for _ in range(samples)]
    for i in picks[: min(50, samples)]:  # warm the page cache and the reader connection
        fn(i)
    times: list[float] = []
    for i in picks:
        start = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - start)
    return {"p50_ms": statistics.median(times) * 1e3, "p95_ms": pct(times, 0.95) * 1e3}


def rates(batch_times: list[float], written: int) -> dict[str, Any]:
    return {
        "records": written,
        "batches": len(batch_times),
        "records_per_s": written / sum(batch_times),
        "batch_p50_ms": statistics.median(batch_times) * 1e3,
        "batch_p95_ms": pct(batch_times, 0.95) * 1e3,
    }


class Pass:
    """One writer's batches of one pass: seconds and WAL pages of each."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.pages: list[int] = []


def load(
    store: RatatoskrAffectStore,
    keys: int,
    revisions: int,
    progress: bool,
    beside: dict[str, BareWriter] | None = None,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], list[dict[str, Pass]]]:
    """``put_many`` of every batch, each followed by the same batch through each writer
    of ``beside`` (interleaved, so the disk's other load falls on all of them alike)."""
    writers = {PUT: store.database, **{name: w.db for name, w in (beside or {}).items()}}
    counters = {name: WalPages(db) for name, db in writers.items()}
    passes: list[dict[str, Pass]] = []
    total_start = time.perf_counter()
    for rev in range(1, revisions + 1):
        this = {name: Pass() for name in writers}
        passes.append(this)
        pass_start = time.perf_counter()
        for start in range(0, keys, BATCH):
            records = [record(i, rev) for i in range(start, min(keys, start + BATCH))]
            t0 = time.perf_counter()
            store.put_many(records, idempotency_key=f"r{rev}-b{start}", ctx=CTX)
            this[PUT].times.append(time.perf_counter() - t0)
            this[PUT].pages.append(counters[PUT].last)
            for name, writer in (beside or {}).items():
                this[name].times.append(writer.write(rev, start, keys))
                this[name].pages.append(counters[name].last)
        if progress:
            took = time.perf_counter() - pass_start
            print(f"  revision {rev}: {keys} records in {took:.1f} s")
    written = keys * revisions

    def whole(name: str) -> dict[str, Any]:
        times = [t for p in passes for t in p[name].times]
        pages = [n for p in passes for n in p[name].pages]
        return {**rates(times, written), "pages_per_commit": statistics.mean(pages)}

    put = {**whole(PUT), "wall_s": time.perf_counter() - total_start}
    return put, {name: whole(name) for name in beside or {}}, passes


PUT = "put_many (the store)"


class WalPages:
    """The WAL pages the last commit of ``db``'s writer added, from a WAL hook.

    A WAL hook replaces SQLite's autocheckpoint (which is one), so this one runs it
    too: a PASSIVE checkpoint once the WAL holds ``wal_autocheckpoint`` pages. After a
    complete checkpoint the next commit starts the WAL again from its first frame.
    """

    def __init__(self, db: Database) -> None:
        self.last = 0
        self._frames = 0
        with db.write() as conn:  # the writer connection (an empty transaction)
            limit = int(conn.execute("PRAGMA wal_autocheckpoint").fetchall()[0][0])  # type: ignore[arg-type]

            def hook(c: apsw.Connection, name: str, frames: int) -> int:
                self.last = frames - self._frames if frames > self._frames else frames
                self._frames = frames
                if limit > 0 and frames >= limit:
                    c.wal_checkpoint(name)
                return apsw.SQLITE_OK

            conn.set_wal_hook(hook)


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode("utf-8")


class BareWriter:
    """The same transactions as ``put_many`` with their rows made before the clock
    starts: SQLite and the disk alone. ``layout`` is ``"current"`` (the store's
    schema and rows), ``"v1"`` (schema v1 and the rows v1 wrote: the record in
    current and in history) or ``"commit"`` (one ledger row per transaction, the
    floor of a synchronous commit)."""

    def __init__(self, path: Path, *, layout: str) -> None:
        self.path = path
        self.layout = layout
        steps = MIGRATIONS[:1] if layout == "v1" else MIGRATIONS
        self.db = Database(str(path), plane=PLANE, migrations=steps)
        self.result = _json({"replayed": False, "written": BATCH})
        # What the store keeps between batches: each key's key_id and the next id.
        self.next_id = 1
        self.key_ids: dict[str, int] = {}

    def write(self, rev: int, start: int, keys: int) -> float:
        """One batch; returns the seconds its transaction took."""
        now = time.time()
        stamp = rfc3339(now)
        ledger = (f"bench/put_many/r{rev}-b{start}", "0" * 64, self.result, now + 86_400)
        history: list[tuple[Any, ...]] = []
        current: list[tuple[Any, ...]] = []
        scope: list[tuple[str, str, str]] = []
        for i in range(start, min(keys, start + BATCH)):
            rec = record(i, rev)
            key, text, scope_text = rec["key"], _json(rec), _json(rec["scope"])
            if self.layout == "v1":
                history.append((key, rev, text, stamp))
                current.append((key, text, scope_text, rev, stamp))
            else:
                row_id = self.next_id
                self.next_id += 1
                key_id = self.key_ids.setdefault(key, row_id)
                history.append((row_id, key_id, rev, text, stamp))
                current.append(
                    (key, key_id, 1, row_id, scope_text)
                    if rev == 1
                    else (rev, row_id, scope_text, key)
                )
            if rev == 1:
                scope += [(a, v, key) for a, v in rec["scope"].items()]
        t0 = time.perf_counter()
        with self.db.write() as conn:
            if self.layout == "v1":
                conn.executemany(
                    "INSERT INTO affect_history (key, revision, record_json, recorded_at)"
                    " VALUES (?, ?, ?, ?)",
                    history,
                )
                conn.executemany(
                    "INSERT INTO affect_current (key, record_json, scope_json, revision,"
                    " recorded_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET"
                    " record_json = excluded.record_json, scope_json = excluded.scope_json,"
                    " revision = excluded.revision, recorded_at = excluded.recorded_at",
                    current,
                )
            elif self.layout == "current":
                conn.executemany(
                    "INSERT INTO affect_history (id, key_id, revision, record_json, recorded_at)"
                    " VALUES (?, ?, ?, ?, ?)",
                    history,
                )
                conn.executemany(
                    "INSERT INTO affect_current (key, key_id, revision, head, scope_json)"
                    " VALUES (?, ?, ?, ?, ?)"
                    if rev == 1
                    else "UPDATE affect_current SET revision = ?, head = ?, scope_json = ?"
                    " WHERE key = ?",
                    current,
                )
            if scope and self.layout != "commit":
                conn.executemany(
                    "INSERT INTO affect_scope (axis, value, key) VALUES (?, ?, ?)", scope
                )
            conn.execute(
                f"INSERT OR REPLACE INTO {LEDGER.table} (idempotency_id, digest, result_json,"
                " expires_at) VALUES (?, ?, ?, ?)",
                ledger,
            )
        return time.perf_counter() - t0

    def close(self) -> None:
        self.db.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=2_000, help="distinct keys (default 2000)")
    parser.add_argument("--revisions", type=int, default=3, help="revisions per key (default 3)")
    parser.add_argument("--samples", type=int, default=2_000, help="reads per latency figure")
    parser.add_argument("--dir", help="where to create the database (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the database file")
    parser.add_argument("--out", help="write the markdown results to this file")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--no-ceiling", action="store_true", help="skip the disk-ceiling runs beside put_many"
    )
    args = parser.parse_args()

    workdir = Path(args.dir or tempfile.mkdtemp(prefix="affect-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    db = workdir / "affect-bench.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    rng = random.Random(args.seed)
    n, revs = args.keys, args.revisions
    store = open_affect_store(str(db))
    beside: dict[str, BareWriter] = {}
    if not args.no_ceiling:
        beside = {
            "SQLite alone, same rows": BareWriter(workdir / "ceiling.db", layout="current"),
            "SQLite alone, schema v1 rows": BareWriter(workdir / "ceiling-v1.db", layout="v1"),
            "commit floor": BareWriter(workdir / "commit-floor.db", layout="commit"),
        }
    try:
        print(f"loading {n:,} keys × {revs} revisions in batches of {BATCH} into {db}")
        put, ceilings, passes = load(store, n, revs, progress=True, beside=beside)

        def get(i: int) -> None:
            assert store.get(key_of(i)) is not None

        def history(i: int) -> None:
            assert len(store.history(key_of(i))["items"]) == revs

        def history_page2(i: int) -> None:
            store.history(key_of(i), limit=3, before_revision=max(1, revs - 2))

        tenant = scope_of(0)
        reads = {
            "get": latency(get, args.samples, rng, n),
            "history (first page, all revisions)": latency(history, args.samples, rng, n),
            "history (keyset page 2, limit 3)": latency(history_page2, args.samples, rng, n),
        }
        list_samples = max(50, args.samples // 10)
        list_cases: dict[str, Callable[[int], Any]] = {
            "list unfiltered, limit 50": lambda i: store.list(limit=50),
            "list 1 tenant (1%), limit 50": lambda i: store.list(
                scope_all={"tenant": scope_of(i)["tenant"]}, limit=50
            ),
            "list tenant + end user (0.1%), limit 50": lambda i: store.list(
                scope_all=scope_of(i), limit=50
            ),
            "list scope_any 3 tenants, limit 50": lambda i: store.list(
                scope_any=[{"tenant": scope_of(i + d)["tenant"]} for d in range(3)], limit=50
            ),
            "list deep page (after_key), limit 50": lambda i: store.list(
                after_key=key_of(i), limit=50
            ),
        }
        for name, fn in list_cases.items():
            reads[name] = latency(fn, list_samples, rng, n)
        assert store.list(scope_all=tenant, limit=1)["items"]
    finally:
        store.close()
        for writer in beside.values():
            writer.close()
    size = sum(Path(f"{db}{s}").stat().st_size for s in ("", "-wal") if Path(f"{db}{s}").exists())
    if not args.keep and not args.dir:
        shutil.rmtree(workdir, ignore_errors=True)

    versions = driver_versions()
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    summary = (
        f"{n:,} keys × {revs} revisions ({put['records']:,} records, "
        f"file {size / 2**20:,.0f} MiB): "
        f"put_many {put['records_per_s']:,.0f} records/s in batches of {BATCH} "
        f"(batch p50 {put['batch_p50_ms']:.1f} ms); "
        f"get p50 {reads['get']['p50_ms']:.3f} ms; "
        f"history p50 {reads['history (first page, all revisions)']['p50_ms']:.3f} ms "
        f"({when}, {machine}, SQLite {versions['sqlite']}, synchronous=FULL)"
    )
    lines = [
        f"# Affect plane benchmark — {when}",
        "",
        summary,
        "",
        "| measure | p50 ms | p95 ms |",
        "|---|---|---|",
        f"| put_many batch of {BATCH} | {put['batch_p50_ms']:.2f} | {put['batch_p95_ms']:.2f} |",
        *(f"| {k} | {v['p50_ms']:.3f} | {v['p95_ms']:.3f} |" for k, v in reads.items()),
        "",
        f"Load: {put['records']:,} records in {put['batches']:,} batches, "
        f"{put['wall_s']:.1f} s wall{' (the ceiling writers interleaved)' if ceilings else ''},"
        f" {put['records_per_s']:,.0f} records/s inside put_many.",
    ]
    if ceilings:
        lines += [
            "",
            "The disk's ceiling in the same run (same transactions, rows made beforehand;"
            " each batch of put_many followed by the same batch through each writer):",
            "",
            "| writer | records/s | batch p50 ms | batch p95 ms | WAL pages/commit"
            " | put_many ÷ it |",
            "|---|---|---|---|---|---|",
            *(
                f"| {name} | {c['records_per_s']:,.0f} | {c['batch_p50_ms']:.2f}"
                f" | {c['batch_p95_ms']:.2f} | {c['pages_per_commit']:.1f}"
                f" | {put['records_per_s'] / c['records_per_s']:.2f} |"
                for name, c in {PUT: put, **ceilings}.items()
            ),
        ]
    lines += [
        "",
        "Per pass (pass r writes revision r of every key; records/s, WAL pages per commit):",
        "",
        "| writer | " + " | ".join(f"rev {r}" for r in range(1, len(passes) + 1)) + " |",
        "|---|" + "---|" * len(passes),
        *(
            f"| {name} | "
            + " | ".join(
                f"{len(p[name].times) and n / sum(p[name].times):,.0f} /s,"
                f" {statistics.mean(p[name].pages):.1f} p"
                for p in passes
            )
            + " |"
            for name in passes[0]
        ),
    ]
    text = "\n".join(lines)
    print()
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
