"""The HTTP path side by side with its floor: ratatoskr over the Bifrost wire against a
bare Starlette app under the same uvicorn that answers pre-rendered bodies of the same size.

    .venv/bin/python benchmarks/wire_bench.py --quick       # N = 10k only, ~2-3 min
    .venv/bin/python benchmarks/wire_bench.py               # N = 10k and N_big = 100k

What it does, in order (every process it starts is stopped, whatever happens):

1. starts ``ratatoskr serve`` (all planes, fresh files in a temp dir, a random Heimdall key,
   a free port on 127.0.0.1) and seeds the memory plane over HTTP with N chunks of 384 dims
   in 100 tenants (1% each), and the VMP plane with a few thousand vectors;
2. sends each verb a few times to learn ratatoskr's response size, then starts the *floor*:
   a bare Starlette app launched like the provider (``uvicorn.Server(config).run(sockets=…)``
   on a listening socket made with ``IPPROTO_TCP``, so asyncio sets ``TCP_NODELAY`` on its
   connections; uvloop sets it anyway) answering each verb with a pre-rendered body of that
   size;
3. per verb, sequential keep-alive calls from one ``httpx.Client``, ratatoskr and floor in
   alternating blocks with the very same request bytes (bodies and headers, tokens minted
   before the timed loop), and each server's CPU time per request (psutil, or /proc);
4. stops the provider and times the same reads through the store API in this process
   (``open_memory_store`` / ``open_vmp_store`` on the same files, read-only), so
   "HTTP − store" is what the wire costs on top of the store call;
5. a load table: 8 client processes (each its own interpreter, tokens pre-minted) doing
   one-tenant searches against ``ratatoskr serve --workers 1`` and ``--workers 2`` (when the
   option exists) and against the floor, at N and N_big;
6. writes a markdown report to ``--out`` and prints it.

Environment: ``PYTHONPATH=<tree>/packages/*/src`` (colon-joined) measures another copy of
the code (the report names where ``ratatoskr`` was imported from); ``OPENBLAS_NUM_THREADS``
and friends are inherited by the servers and reported; ``WIRE_BENCH_KEEP=1`` keeps the temp
dir (databases and server logs).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import multiprocessing as mp
import os
import platform
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bifrost.client import build_envelope, mint_token
from ratatoskr.provider.testing import ServerProcess, child_env, free_port, launch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RATATOSKR = Path(sys.executable).with_name("ratatoskr")
DIM = 384
TENANTS = 100
TOP_K = 10
AFFECT_KEYS = 500
SEED_BATCH = 250
HOST = "127.0.0.1"
ACTOR = "wire-bench"
TOKEN_LIFETIME_S = 240  # the provider refuses more than 300 s
MEMORY_CALL = "/memory/bifrost/memory-call"
AFFECT_CALL = "/affect/bifrost/affect-call"
VMP_META_GET = "/vmp/v1/memory/meta/get"
VMP_META_SET = "/vmp/v1/memory/meta/set"
VMP_UPSERT = "/vmp/v1/memory/upsert_vector"
VMP_SEARCH = "/vmp/v1/memory/search_vector"
NAGLE_MS = 30.0  # a gap this large on small answers is the Nagle / delayed-ACK stall


# -- the floor contender --------------------------------------------------------------------

FLOOR_APP = textwrap.dedent(
    '''
    """wire_bench's floor: a bare Starlette app answering pre-rendered bodies, launched the
    way ``ratatoskr serve`` launches its app (socket with IPPROTO_TCP, uvicorn.Server.run)."""
    import json
    import os
    import socket
    import sys

    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route


    def _body(size):
        head, tail = b'{"ok":true,"pad":"', b'"}'
        if size < len(head) + len(tail):
            return b" " * size
        return head + b"x" * (size - len(head) - len(tail)) + tail


    with open(os.environ["WIRE_FLOOR_SIZES"]) as f:
        BODIES = {name: _body(int(size)) for name, size in json.load(f).items()}


    async def answer(request):
        await request.body()
        return Response(BODIES[request.path_params["name"]], media_type="application/json")


    async def healthz(request):
        return Response(b'{"status":"ok"}', media_type="application/json")


    app = Starlette(
        routes=[
            Route("/floor/{name}", answer, methods=["POST", "GET"]),
            Route("/healthz", healthz, methods=["GET"]),
        ]
    )


    def main():
        host, port, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
        sock.set_inheritable(True)
        print(f"floor: serving http://{host}:{port}", flush=True)  # the launcher's signal
        config = uvicorn.Config(
            "floor_app:app" if workers > 1 else app,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=30,
            access_log=False,
            workers=workers,
        )
        if workers > 1:
            from uvicorn.supervisors import Multiprocess

            Multiprocess(config, sockets=[sock]).run()
        else:
            uvicorn.Server(config).run(sockets=[sock])


    if __name__ == "__main__":
        main()
    '''
)


# -- small helpers ----------------------------------------------------------------------------


def pct(xs: Sequence[float], q: float) -> float:
    """The q-th percentile (0…100), linear interpolation; NaN when empty."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def ms(seconds: float) -> str:
    if seconds != seconds:  # NaN
        return "n/a"
    v = seconds * 1e3
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def version_of(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def loadavg() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def git(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip()


def unit_vectors(rng: np.random.Generator, count: int) -> list[list[float]]:
    """Random unit vectors of DIM, rounded to 6 decimals (what a client would send)."""
    m = rng.standard_normal((count, DIM))
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    return [[float(x) for x in row] for row in np.round(m, 6)]


def tenant(i: int) -> str:
    return f"t{i % TENANTS:02d}"


def chunk_id(i: int) -> str:
    return f"c{i:07d}"


def record(i: int, vector: list[float], revision_note: str = "") -> dict[str, Any]:
    return {
        "id": chunk_id(i),
        "embedding": vector,
        "scope": {"tenant": tenant(i), "end_user": f"u{i % (TENANTS * 10):03d}"},
        "content": {
            "text": f"Chunk {i}{revision_note}: the agent noted that the user prefers short"
            " answers, writes in the morning and keeps their notes in plain text files.",
            "turn": i,
        },
        "distillate": f"preference note {i}",
        "origin": "conversation",
    }


# -- process trees: CPU time and RSS (psutil when installed, else /proc) --------------------


class ProcTree:
    """A process and its descendants (uvicorn workers), summed."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            import psutil  # type: ignore[import-untyped,import-not-found,unused-ignore]  # noqa: PLC0415

            self._ps: Any = psutil
        except ImportError:
            self._ps = None
        self._tick = os.sysconf("SC_CLK_TCK")
        self._page = os.sysconf("SC_PAGE_SIZE")

    @property
    def source(self) -> str:
        return "psutil" if self._ps is not None else "/proc"

    def _pids(self) -> list[int]:
        if self._ps is not None:
            try:
                root = self._ps.Process(self.pid)
                return [self.pid, *(c.pid for c in root.children(recursive=True))]
            except self._ps.Error:
                return []
        parents: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                stat = self._stat(int(entry.name))
                if stat:
                    parents[int(entry.name)] = int(stat[1])
        out, frontier = [self.pid], [self.pid]
        while frontier:
            nxt = [p for p, pp in parents.items() if pp in frontier]
            out += nxt
            frontier = nxt
        return out

    @staticmethod
    def _stat(pid: int) -> list[str]:
        """/proc/PID/stat fields after the command name (state is [0], ppid [1])."""
        try:
            raw = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return []
        return raw[raw.rfind(")") + 2 :].split()

    def pids(self) -> list[int]:
        return self._pids()

    def cpu_s(self) -> float:
        """User + system CPU seconds of the tree's live processes."""
        total = 0.0
        for pid in self._pids():
            if self._ps is not None:
                try:
                    t = self._ps.Process(pid).cpu_times()
                    total += t.user + t.system
                except self._ps.Error:
                    pass
            else:
                stat = self._stat(pid)
                if stat:
                    total += (int(stat[11]) + int(stat[12])) / self._tick
        return total

    def rss_bytes(self) -> int:
        total = 0
        for pid in self._pids():
            if self._ps is not None:
                with contextlib.suppress(self._ps.Error):
                    total += int(self._ps.Process(pid).memory_info().rss)
            else:
                stat = self._stat(pid)
                if stat:
                    total += int(stat[21]) * self._page
        return total


# -- servers ----------------------------------------------------------------------------------

STARTED: list[Server] = []  # every server this run started, stopped in main's finally


class Server:
    """A server subprocess in its own process group on 127.0.0.1, started by the launcher
    the tests use (:func:`ratatoskr.provider.testing.launch`); always stopped."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.process: ServerProcess | None = None
        self.port = 0
        self.url = ""

    def start(self, port: int, timeout_s: float = 180) -> Server:
        self.port = port
        self.url = f"http://{HOST}:{port}"
        # Both print their URL once the socket listens; /healthz then says the app is up.
        self.process = launch(
            self.argv,
            env=child_env(self.env),
            cwd=ROOT,
            ready=lambda line: line.startswith(("ratatoskr: serving ", "floor: serving ")),
            timeout=timeout_s,
        )
        STARTED.append(self)
        deadline = time.monotonic() + timeout_s
        with httpx.Client(trust_env=False, timeout=2) as probe:
            while time.monotonic() < deadline:
                if self.process.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited at start:\n{self.log_tail()}")
                try:
                    if probe.get(self.url + "/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
            else:
                self.stop()
                raise RuntimeError(f"{self.name} did not answer /healthz:\n{self.log_tail()}")
        self.settle()
        return self

    def settle(self, quiet_cpu_s: float = 0.05, window_s: float = 0.5, max_s: float = 60) -> None:
        """Wait until the process tree is idle (workers done loading their stores)."""
        tree = self.tree()
        deadline = time.monotonic() + max_s
        while time.monotonic() < deadline:
            c0 = tree.cpu_s()
            time.sleep(window_s)
            if tree.cpu_s() - c0 < quiet_cpu_s:
                return

    def tree(self) -> ProcTree:
        assert self.process is not None
        return ProcTree(self.process.pid)

    def event_loop(self) -> str:
        """uvloop when its extension is mapped in a process of the tree, else asyncio."""
        for pid in self.tree().pids():
            with contextlib.suppress(OSError):
                if "uvloop/loop" in Path(f"/proc/{pid}/maps").read_text():
                    return "uvloop"
        return "asyncio"

    def log_tail(self, lines: int = 30) -> str:
        return "".join(self.process.output[-lines:]) if self.process else ""

    def stop(self) -> None:
        """SIGTERM, SIGKILL after 30 s, then whatever is left of the process group (workers
        may outlive their supervisor)."""
        if self.process is not None:
            self.process.close()
        self.process = None
        if self in STARTED:
            STARTED.remove(self)


def serve_supports_workers() -> bool:
    out = subprocess.run(
        [str(RATATOSKR), "serve", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    return "--workers" in out.stdout


# -- the calls --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prepared:
    """One request's exact bytes (the floor is sent the same ones)."""

    body: bytes
    headers: dict[str, str]
    args: dict[str, Any] = field(default_factory=dict)  # for the store replay
    grant: dict[str, str] = field(default_factory=dict)
    method: str = "POST"
    query: str = ""


def memory_call(
    key: bytes,
    verb: str,
    args: dict[str, Any],
    grant: dict[str, str],
    idem: str | None = None,
    plane: str = "memory",
) -> Prepared:
    body = build_envelope(verb, args, idempotency_key=idem)
    token = mint_token(
        key,
        plane=plane,
        verb=verb,
        body=body,
        actor=ACTOR,
        scope=grant,
        lifetime_s=TOKEN_LIFETIME_S,
    )
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    return Prepared(body, headers, args, dict(grant))


def vmp_call(payload: dict[str, Any]) -> Prepared:
    body = json.dumps(payload, separators=(",", ":")).encode()
    return Prepared(body, {"content-type": "application/json"}, payload)


@dataclass
class VerbSpec:
    name: str  # also the floor's route
    label: str
    path: str
    reps: int
    make: Callable[[int], Prepared]  # k -> call k (mints its token)
    store_op: str | None = None


@dataclass
class Sample:
    lat: list[float] = field(default_factory=list)
    errors: int = 0
    cpu_s: float = 0.0

    @property
    def count(self) -> int:
        return len(self.lat)

    def cpu_per_req(self) -> float:
        return self.cpu_s / self.count if self.count else float("nan")


@dataclass
class VerbResult:
    spec: VerbSpec
    req_bytes: int
    resp_bytes: int
    ours: Sample
    floor: Sample
    mint_s: float  # client-side token minting per call (excluded from the timing)
    calls: list[Prepared] = field(default_factory=list)  # the timed calls, for the store replay
    store: Sample | None = None


def run_calls(client: httpx.Client, url: str, calls: Sequence[Prepared], sample: Sample) -> None:
    for c in calls:
        t0 = time.perf_counter()
        try:
            r = client.request(c.method, url + c.query, content=c.body or None, headers=c.headers)
            ok = r.status_code == 200
        except httpx.HTTPError:
            ok = False
        sample.lat.append(time.perf_counter() - t0)
        if not ok:
            sample.errors += 1


# -- load: separate client processes ----------------------------------------------------------

CLIENT_RATE_CAP = 120  # pre-minted tokens per client per second of load on a ratatoskr target


def _load_calls(key_hex: str | None, pool: int, rng: np.random.Generator) -> list[Prepared]:
    key = key_hex.encode() if key_hex else secrets.token_bytes(32)
    vectors = unit_vectors(rng, min(pool, 256))
    calls: list[Prepared] = []
    for j in range(pool):
        t = tenant(int(rng.integers(TENANTS)))
        args = {
            "vector": vectors[j % len(vectors)],
            "top_k": TOP_K,
            "scope_all": {"tenant": t},
            "include": {"embedding": False},
        }
        calls.append(memory_call(key, "search", args, {"tenant": t}))
    return calls


def load_client(
    idx: int,
    targets: list[tuple[str, str | None, int]],
    seed: int,
    cmds: mp.Queue[Any],
    ready: mp.Queue[Any],
    out: mp.Queue[Any],
) -> None:
    """One load client process. ``targets`` are (url, Heimdall key or None, pool size): it
    pre-builds and pre-mints every call, then runs the slices the parent sends it.

    A target without a key (the floor) checks no token, so its small pool is cycled;
    a ratatoskr target gets a fresh single-use token per call.
    """
    rng = np.random.default_rng([seed, idx])
    calls = [_load_calls(key, pool, rng) for _, key, pool in targets]
    nxt = [0] * len(targets)
    clients = [httpx.Client(trust_env=False, timeout=60) for _ in targets]

    def take(t: int) -> Prepared | None:
        if nxt[t] >= len(calls[t]):
            if targets[t][1] is not None:
                return None
            nxt[t] = 0
        nxt[t] += 1
        return calls[t][nxt[t] - 1]

    def warm(t: int) -> None:
        """One untimed call: (re)opens the keep-alive connection the server may have closed."""
        for _ in range(3):
            c = take(t)
            if c is None:
                return
            try:
                clients[t].post(targets[t][0], content=c.body, headers=c.headers)
                return
            except httpx.HTTPError:
                time.sleep(0.05)

    try:
        for t in range(len(targets)):
            warm(t)
        ready.put(idx)
        while True:
            cmd = cmds.get(timeout=900)
            if cmd[0] != "run":
                break
            _, t, began, seconds = cmd
            warm(t)
            lat: list[float] = []
            errors = 0
            exhausted = False
            while time.monotonic() < began:
                time.sleep(0.0005)
            stop = began + seconds
            cpu0 = time.process_time()
            while time.monotonic() < stop:
                c = take(t)
                if c is None:
                    exhausted = True
                    break
                t0 = time.perf_counter()
                try:
                    r = clients[t].post(targets[t][0], content=c.body, headers=c.headers)
                    ok = r.status_code == 200
                except httpx.HTTPError:
                    ok = False
                    time.sleep(0.01)
                lat.append(time.perf_counter() - t0)
                if not ok:
                    errors += 1
            out.put(
                {
                    "idx": idx,
                    "lat": lat,
                    "errors": errors,
                    "exhausted": exhausted,
                    "began": began,
                    "ended": time.monotonic(),
                    "cpu": time.process_time() - cpu0,
                }
            )
    finally:
        for client in clients:
            client.close()


@dataclass
class LoadResult:
    n: int
    contender: str
    workers: str
    server: Server | None = None
    url: str = ""
    key_hex: str | None = None
    lat: list[float] = field(default_factory=list)
    errors: int = 0
    wall_s: float = 0.0
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    rss: int = 0
    slices: int = 0
    notes: set[str] = field(default_factory=set)

    @property
    def requests(self) -> int:
        return len(self.lat)

    @property
    def rps(self) -> float:
        return self.requests / self.wall_s if self.wall_s else float("nan")

    def per_req(self, seconds: float) -> float:
        return seconds / self.requests if self.requests else float("nan")


def run_load(
    targets: list[LoadResult], clients: int, rounds: int, slice_s: float, seed: int
) -> None:
    """``clients`` persistent client processes; each round gives every target one slice of
    ``slice_s`` seconds (all clients at once), in an order rotated round by round, so a
    change in the machine's background load falls on every target alike."""
    ctx = mp.get_context("spawn")
    ready: mp.Queue[Any] = ctx.Queue()
    out: mp.Queue[Any] = ctx.Queue()
    cmds: list[mp.Queue[Any]] = [ctx.Queue() for _ in range(clients)]
    pool_ratatoskr = int(rounds * slice_s * CLIENT_RATE_CAP) + 3 * rounds + 10
    spec = [(t.url, t.key_hex, pool_ratatoskr if t.key_hex else 300) for t in targets]
    procs = [
        ctx.Process(target=load_client, args=(i, spec, seed, cmds[i], ready, out), daemon=True)
        for i in range(clients)
    ]
    try:
        for p in procs:
            p.start()
        for _ in procs:
            ready.get(timeout=300)
        for r in range(rounds):
            for k in range(len(targets)):
                t = (k + r) % len(targets)
                run_slice(targets[t], t, cmds, out, clients, slice_s)
    finally:
        for q in cmds:
            q.put(("stop",))
        for p in procs:
            p.join(timeout=15)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)


def run_slice(
    target: LoadResult,
    t: int,
    cmds: list[mp.Queue[Any]],
    out: mp.Queue[Any],
    clients: int,
    slice_s: float,
) -> None:
    assert target.server is not None
    tree = target.server.tree()
    cpu0 = tree.cpu_s()
    began = time.monotonic() + 0.3  # time for every client's warm-up call
    for q in cmds:
        q.put(("run", t, began, slice_s))
    results: list[dict[str, Any]] = []
    deadline = began + slice_s + 120
    rss = tree.rss_bytes()
    while len(results) < clients and time.monotonic() < deadline:
        with contextlib.suppress(queue.Empty):
            results.append(out.get(timeout=0.2))
        if time.monotonic() < began + slice_s:
            rss = max(rss, tree.rss_bytes())
    target.server_cpu_s += tree.cpu_s() - cpu0
    if len(results) < clients:
        raise RuntimeError(f"load: {clients - len(results)} clients did not report")
    for res in results:
        target.lat += res["lat"]
        target.errors += int(res["errors"])
        target.client_cpu_s += float(res["cpu"])
        if res["exhausted"]:
            target.notes.add("a client ran out of pre-minted tokens")
    target.wall_s += max(r["ended"] for r in results) - began
    target.rss = max(target.rss, rss)
    target.slices += 1


# -- the benchmark ----------------------------------------------------------------------------


@dataclass
class Profile:
    reps_small: int
    reps_upsert1: int
    reps_upsert100: int
    reps_vmp_upsert: int
    warmup: int
    blocks: int
    vmp_n: int
    load_rounds: int
    load_slice_s: float


QUICK = Profile(200, 60, 16, 150, 10, 4, 1000, 3, 2.0)
FULL = Profile(600, 200, 40, 400, 20, 5, 2000, 4, 2.5)


def store_op(op: str, mem: Any, vmp: Any) -> Callable[[dict[str, Any]], Any]:
    """The store API call that answers the same arguments as the wire verb."""
    if op == "get":
        return lambda a: mem.get(a["chunk_id"])
    if op == "search":
        return lambda a: mem.search(
            a["vector"], top_k=a["top_k"], scope_all=a["scope_all"], include=a["include"]
        )
    return lambda a: vmp.search_vector(a["query_vector"], a["k"])


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.prof = QUICK if args.quick else FULL
        self.n: int = args.n
        self.n_big: int = 0 if args.quick else args.n_big
        self.clients: int = args.clients
        self.key_hex = secrets.token_hex(32)
        self.key = self.key_hex.encode()  # the provider uses the setting's text as the key
        self.workers_ok = serve_supports_workers()
        self.tmp = Path(tempfile.mkdtemp(prefix="wire-bench-"))
        self.db = {p: self.tmp / f"{p}.db" for p in ("memory", "affect", "vmp")}
        self.rng = np.random.default_rng(args.seed)
        self.seeded = 0
        self.seed_rate: dict[int, float] = {}
        self.vmp_seed_rate = float("nan")
        self.results: list[VerbResult] = []
        self.loads: list[LoadResult] = []
        self.notes: list[str] = []
        self.store_open_note = ""
        self.started = dt.datetime.now()
        self.load_start = loadavg()
        self.source = "psutil"
        self.loops: dict[str, str] = {}

    # servers

    def ratatoskr(self, workers: int | None = None) -> Server:
        argv = [str(RATATOSKR), "serve"]
        if workers is not None and self.workers_ok:
            argv += ["--workers", str(workers)]
        env = {
            **os.environ,
            "RATATOSKR_MEMORY_DB": str(self.db["memory"]),
            "RATATOSKR_AFFECT_DB": str(self.db["affect"]),
            "RATATOSKR_VMP_DB": str(self.db["vmp"]),
            "RATATOSKR_MEMORY_EMBEDDING_DIM": str(DIM),
            "RATATOSKR_VMP_DIM": str(self.args.vmp_dim),
            "RATATOSKR_HEIMDALL_KEY": self.key_hex,
            "RATATOSKR_HOST": HOST,
            "RATATOSKR_LOG_LEVEL": "warning",
        }
        env.pop("RATATOSKR_WORKERS", None)  # the flag decides, not the caller's shell
        port = free_port()
        env["RATATOSKR_PORT"] = str(port)
        name = f"ratatoskr serve{' --workers ' + str(workers) if workers else ''}"
        return Server(name, argv, env).start(port)

    def floor(self, sizes: dict[str, int], workers: int = 1) -> Server:
        app = self.tmp / "floor_app.py"
        app.write_text(FLOOR_APP)
        sizes_file = self.tmp / "floor_sizes.json"
        sizes_file.write_text(json.dumps(sizes))
        port = free_port()
        env = {**os.environ, "WIRE_FLOOR_SIZES": str(sizes_file), "PYTHONPATH": str(self.tmp)}
        argv = [sys.executable, str(app), HOST, str(port), str(workers)]
        return Server(f"floor ({workers} worker)", argv, env).start(port)

    # seeding

    def seed_memory(self, server: Server, upto: int) -> None:
        log(f"seeding memory plane {self.seeded:,} → {upto:,} chunks over HTTP")
        t0 = time.perf_counter()
        first = self.seeded
        with httpx.Client(trust_env=False, timeout=120) as client:
            for start in range(self.seeded, upto, SEED_BATCH):
                stop = min(start + SEED_BATCH, upto)
                rng = np.random.default_rng([self.args.seed, start])
                vecs = unit_vectors(rng, stop - start)
                recs = [record(i, vecs[i - start]) for i in range(start, stop)]
                call = memory_call(
                    self.key, "upsert_many", {"records": recs}, {}, idem=f"seed-{start}"
                )
                r = client.post(server.url + MEMORY_CALL, content=call.body, headers=call.headers)
                if r.status_code != 200:
                    raise RuntimeError(f"seed batch at {start} failed: {r.status_code} {r.text}")
                self.seeded = stop
        self.seed_rate[upto] = (upto - first) / (time.perf_counter() - t0)

    def seed_vmp(self, server: Server) -> None:
        n = self.prof.vmp_n
        log(f"seeding VMP plane with {n:,} vectors (dim {self.args.vmp_dim})")
        rng = np.random.default_rng([self.args.seed, 7])
        t0 = time.perf_counter()
        with httpx.Client(trust_env=False, timeout=60) as client:
            for k in range(n):
                vec = [round(float(x), 6) for x in rng.standard_normal(self.args.vmp_dim)]
                r = client.post(
                    server.url + VMP_UPSERT,
                    content=json.dumps({"vector": vec, "metadata": {"k": k}}).encode(),
                    headers={"content-type": "application/json"},
                )
                if r.status_code != 200:
                    raise RuntimeError(f"VMP seed failed: {r.status_code} {r.text}")
        self.vmp_seed_rate = n / (time.perf_counter() - t0)

    def seed_affect(self, server: Server) -> None:
        """AFFECT_KEYS affect keys in the tenants, and one VMP metadata target."""
        recs = [
            {"key": f"k{i}", "scope": {"tenant": tenant(i)}, "v": i} for i in range(AFFECT_KEYS)
        ]
        call = memory_call(
            self.key, "put_many", {"records": recs}, {}, idem="seed-affect", plane="affect"
        )
        with httpx.Client(trust_env=False, timeout=60) as client:
            r = client.post(server.url + AFFECT_CALL, content=call.body, headers=call.headers)
            if r.status_code != 200:
                raise RuntimeError(f"affect seed failed: {r.status_code} {r.text}")
            meta = {"target_id": "rec:1", "metadata": {"note": "wire bench"}}
            r = client.post(server.url + VMP_META_SET, json=meta)
            if r.status_code != 200:
                raise RuntimeError(f"VMP meta seed failed: {r.status_code} {r.text}")

    # the verbs

    def specs(self) -> list[VerbSpec]:
        p, key, n, rng = self.prof, self.key, self.n, self.rng
        qs = unit_vectors(rng, 512)
        vdim = self.args.vmp_dim

        def health(k: int) -> Prepared:
            return memory_call(key, "health", {}, {})

        def describe(k: int) -> Prepared:
            return memory_call(key, "describe_store", {}, {})

        def get(k: int) -> Prepared:
            i = int(rng.integers(n))
            return memory_call(key, "get", {"chunk_id": chunk_id(i)}, {"tenant": tenant(i)})

        def search(embedding: bool) -> Callable[[int], Prepared]:
            def make(k: int) -> Prepared:
                t = tenant(int(rng.integers(TENANTS)))
                args = {
                    "vector": qs[k % len(qs)],
                    "top_k": TOP_K,
                    "scope_all": {"tenant": t},
                    "include": {"embedding": embedding},
                }
                return memory_call(key, "search", args, {"tenant": t})

            return make

        def upsert(size: int) -> Callable[[int], Prepared]:
            def make(k: int) -> Prepared:
                # overwrite seeded ids of one tenant (a one-tenant grant), so the store
                # stays at N chunks; a tenant smaller than the batch: any ids, grant {}
                t = int(rng.integers(TENANTS))
                per_tenant = n // TENANTS
                if per_tenant >= size:
                    rows = rng.choice(per_tenant, size=size, replace=False)
                    ids = [t + TENANTS * int(r) for r in rows]
                    grant = {"tenant": tenant(t)}
                else:
                    ids = [int(i) for i in rng.choice(n, size=size, replace=False)]
                    grant = {}
                vecs = unit_vectors(rng, len(ids))
                recs = [record(i, v, f" r{k}") for i, v in zip(ids, vecs, strict=True)]
                return memory_call(
                    key, "upsert_many", {"records": recs}, grant, idem=f"u{size}-{uuid.uuid4()}"
                )

            return make

        def affect_get(k: int) -> Prepared:
            i = int(rng.integers(AFFECT_KEYS))
            return memory_call(key, "get", {"key": f"k{i}"}, {"tenant": tenant(i)}, plane="affect")

        def vmp_get(k: int) -> Prepared:
            return Prepared(b"", {}, method="GET", query="?target_id=rec:1")

        def vmp_upsert(k: int) -> Prepared:
            vec = [round(float(x), 6) for x in rng.standard_normal(vdim)]
            return vmp_call({"vector": vec, "metadata": {"k": k}})

        def vmp_search(k: int) -> Prepared:
            vec = [round(float(x), 6) for x in rng.standard_normal(vdim)]
            return vmp_call({"query_vector": vec, "k": TOP_K})

        s = p.reps_small
        return [
            VerbSpec("health", "memory `health`", MEMORY_CALL, s, health),
            VerbSpec("get", "memory `get` (one chunk)", MEMORY_CALL, s, get, "get"),
            VerbSpec("describe_store", "memory `describe_store`", MEMORY_CALL, s, describe),
            VerbSpec("affect_get", "affect `get` (one key)", AFFECT_CALL, s, affect_get),
            VerbSpec("vmp_get", "VMP `meta/get` (GET)", VMP_META_GET, s, vmp_get),
            VerbSpec(
                "search",
                "memory `search` top 10, one tenant (1%), no embeddings",
                MEMORY_CALL,
                s,
                search(False),
                "search",
            ),
            VerbSpec(
                "search_emb",
                "memory `search` top 10, one tenant, with embeddings",
                MEMORY_CALL,
                s,
                search(True),
                "search",
            ),
            VerbSpec(
                "upsert_1",
                "memory `upsert_many` of 1 chunk",
                MEMORY_CALL,
                p.reps_upsert1,
                upsert(1),
            ),
            VerbSpec(
                "upsert_100",
                "memory `upsert_many` of 100 chunks",
                MEMORY_CALL,
                p.reps_upsert100,
                upsert(100),
            ),
            VerbSpec(
                "vmp_upsert",
                f"VMP `upsert_vector` (dim {vdim})",
                VMP_UPSERT,
                p.reps_vmp_upsert,
                vmp_upsert,
            ),
            VerbSpec(
                "vmp_search",
                f"VMP `search_vector` k=10 (dim {vdim})",
                VMP_SEARCH,
                s,
                vmp_search,
                "vmp_search",
            ),
        ]

    def calibrate(self, server: Server, specs: list[VerbSpec]) -> dict[str, tuple[int, int]]:
        """Request and response sizes of each verb (median of a few real calls)."""
        sizes: dict[str, tuple[int, int]] = {}
        with httpx.Client(trust_env=False, timeout=60) as client:
            for spec in specs:
                req, resp = [], []
                for k in range(5):
                    call = spec.make(k)
                    r = client.request(
                        call.method,
                        server.url + spec.path + call.query,
                        content=call.body or None,
                        headers=call.headers,
                    )
                    if r.status_code != 200:
                        raise RuntimeError(f"{spec.name}: HTTP {r.status_code} {r.text[:300]}")
                    req.append(len(call.body))
                    resp.append(len(r.content))
                sizes[spec.name] = (int(pct(req, 50)), int(pct(resp, 50)))
        return sizes

    def sequential(
        self, ours: Server, floor: Server, specs: list[VerbSpec], sizes: dict[str, tuple[int, int]]
    ) -> None:
        p = self.prof
        t_ours, t_floor = ours.tree(), floor.tree()
        with httpx.Client(trust_env=False, timeout=60) as client:
            for spec in specs:
                warm = max(3, p.warmup // (4 if spec.name == "upsert_100" else 1))
                t0 = time.perf_counter()
                calls = [spec.make(k) for k in range(warm + spec.reps)]
                mint_s = (time.perf_counter() - t0) / len(calls)
                log(
                    f"timing {spec.name}: {spec.reps} calls each (blocks of "
                    f"{-(-spec.reps // p.blocks)}, ratatoskr and floor alternating)"
                )
                url_ours = ours.url + spec.path
                url_floor = floor.url + "/floor/" + spec.name
                run_calls(client, url_ours, calls[:warm], Sample())
                run_calls(client, url_floor, calls[:warm], Sample())
                a, b = Sample(), Sample()
                timed = calls[warm:]
                step = -(-len(timed) // p.blocks)
                for lo in range(0, len(timed), step):
                    block = timed[lo : lo + step]
                    c0 = t_ours.cpu_s()
                    run_calls(client, url_ours, block, a)
                    a.cpu_s += t_ours.cpu_s() - c0
                    c0 = t_floor.cpu_s()
                    run_calls(client, url_floor, block, b)
                    b.cpu_s += t_floor.cpu_s() - c0
                req_b, resp_b = sizes[spec.name]
                self.results.append(VerbResult(spec, req_b, resp_b, a, b, mint_s, timed))

    def store_reads(self) -> None:
        """The same reads through the store API in this process, on the same files."""
        from ratatoskr.memory import open_memory_store  # noqa: PLC0415
        from ratatoskr.sqlite import ConnectionOptions  # noqa: PLC0415
        from ratatoskr.vmp import open_vmp_store  # noqa: PLC0415

        def opened(plane: str, opener: Callable[..., Any]) -> Any:
            """The plane's file read-only, or else a copy of it opened normally."""
            try:
                store = opener(str(self.db[plane]), options=ConnectionOptions(readonly=True))
                self.store_open_note = self.store_open_note or "the files opened read-only"
                return store
            except Exception as exc:
                copy = self.tmp / "copy"
                copy.mkdir(exist_ok=True)
                for suffix in ("", "-wal"):
                    src = Path(str(self.db[plane]) + suffix)
                    if src.exists():
                        shutil.copy2(src, copy / src.name)
                self.store_open_note = f"copies of the files (read-only open: {exc!r:.80})"
                return opener(str(copy / self.db[plane].name))

        mem = opened("memory", lambda path, **kw: open_memory_store(path, embedding_dim=DIM, **kw))
        try:
            vmp = opened(
                "vmp", lambda path, **kw: open_vmp_store(path, dim=self.args.vmp_dim, **kw)
            )
        except BaseException:
            mem.close()
            raise
        try:
            for res in self.results:
                op = res.spec.store_op
                if op is None:
                    continue
                calls = res.calls
                run = store_op(op, mem, vmp)
                for c in calls[: self.prof.warmup]:
                    run(c.args)
                sample = Sample()
                for c in calls:
                    t0 = time.perf_counter()
                    run(c.args)
                    sample.lat.append(time.perf_counter() - t0)
                res.store = sample
        finally:
            mem.close()
            vmp.close()

    def store_writes(self) -> None:
        """The timed ``upsert_many`` batches again, through the store API in this process
        (the file opened as the server opens it; fresh idempotency keys, so each is a new
        committed write, as over HTTP): the store's own rate beside the wire's."""
        from bifrost.context import DispatchContext  # noqa: PLC0415
        from ratatoskr.memory import open_memory_store  # noqa: PLC0415

        res = next((r for r in self.results if r.spec.name == "upsert_100"), None)
        if res is None:
            return
        mem = open_memory_store(str(self.db["memory"]), embedding_dim=DIM)
        try:
            sample = Sample()
            for k, c in enumerate(res.calls):
                ctx = DispatchContext(actor=ACTOR, scope=dict(c.grant), verb="upsert_many")
                records = json.loads(json.dumps(c.args["records"]))  # a fresh parse, as served
                t0 = time.perf_counter()
                mem.upsert_many(records, idempotency_key=f"store-{k}-{uuid.uuid4()}", ctx=ctx)
                sample.lat.append(time.perf_counter() - t0)
            res.store = sample
        finally:
            mem.close()

    def load_round(self, n: int) -> None:
        """Every load target up at once (ratatoskr with 1 and 2 workers on the same files,
        the floor with 1 and 2), then interleaved slices from the same client processes."""
        p = self.prof
        targets: list[LoadResult] = []
        na = LoadResult(n, "ratatoskr", "2: n/a")
        na.notes.add("`ratatoskr serve` has no --workers option in this code")
        try:
            for workers in (1, 2):
                if workers > 1 and not self.workers_ok:
                    continue
                log(f"load at {n:,}: starting ratatoskr serve --workers {workers}")
                server = self.ratatoskr(workers if self.workers_ok else None)
                targets.append(
                    LoadResult(
                        n, "ratatoskr", str(workers), server, server.url + MEMORY_CALL, self.key_hex
                    )
                )
            sizes = {"search": self.search_size()}
            for workers in (1, 2):
                server = self.floor(sizes, workers)
                targets.append(
                    LoadResult(n, "floor", str(workers), server, server.url + "/floor/search")
                )
            log(
                f"load at {n:,}: {self.clients} client processes, {p.load_rounds} rounds of"
                f" {p.load_slice_s:g} s per target, {len(targets)} targets interleaved"
            )
            run_load(targets, self.clients, p.load_rounds, p.load_slice_s, self.args.seed + n)
        finally:
            for t in targets:
                if t.server is not None:
                    t.server.stop()
        ours = [t for t in targets if t.contender == "ratatoskr"]
        floors = [t for t in targets if t.contender == "floor"]
        self.loads += ours + ([] if self.workers_ok else [na]) + floors

    def search_size(self) -> int:
        for r in self.results:
            if r.spec.name == "search":
                return r.resp_bytes
        return 2000

    def run(self) -> None:
        log(f"temp dir {self.tmp}; --workers supported: {self.workers_ok}")
        server = self.ratatoskr(1 if self.workers_ok else None)
        self.source = server.tree().source
        specs = self.specs()
        try:
            self.seed_memory(server, self.n)
            self.seed_vmp(server)
            self.seed_affect(server)
            sizes = self.calibrate(server, specs)
            floor = self.floor({name: resp for name, (_, resp) in sizes.items()})
            self.loops = {"ratatoskr": server.event_loop(), "floor": floor.event_loop()}
            try:
                self.sequential(server, floor, specs, sizes)
            finally:
                floor.stop()
        finally:
            server.stop()
        log("store API reads in-process")
        self.store_reads()
        log("store API upserts in-process")
        self.store_writes()
        self.load_round(self.n)
        if self.n_big > self.n:
            server = self.ratatoskr(1 if self.workers_ok else None)
            try:
                self.seed_memory(server, self.n_big)
            finally:
                server.stop()
            self.load_round(self.n_big)

    # the report

    def report(self, elapsed_s: float) -> str:
        a = self.args
        cmd = ".venv/bin/python benchmarks/wire_bench.py"
        cmd += " --quick" if a.quick else f" --n-big {a.n_big}"
        cmd += f" --n {a.n}" if a.n != 10_000 else ""
        cmd += f" --clients {a.clients}" if a.clients != 8 else ""
        cmd += f" --vmp-dim {a.vmp_dim}" if a.vmp_dim != DIM else ""
        where = code_location()
        if where.startswith("packages/"):
            dirty = git("status", "--porcelain", "--", "packages")
            commit = git("rev-parse", "--short", "HEAD") or "unknown"
            code = f"ratatoskr at {commit}" + (
                " with uncommitted changes in packages/" if dirty else ""
            )
        else:
            code = f"ratatoskr imported from {where} (PYTHONPATH), not from this checkout"
        lines = [
            f"# Wire benchmark: the HTTP path against its floor ({self.started:%Y-%m-%d %H:%M})",
            "",
            f"Command: `{cmd}` ({elapsed_s:.0f} s).",
            "",
            f"Machine: {cpu_model()}, {os.cpu_count()} cores; {platform.system()}"
            f" {platform.release()}; Python {platform.python_version()}; load average"
            f" (1/5/15 min) {self.load_start} at the start, {loadavg()} at the end.",
            f"Versions: uvicorn {version_of('uvicorn')}, starlette {version_of('starlette')},"
            f" httpx {version_of('httpx')}; {code}.",
            f"Store: {self.n:,} chunks of {DIM} dims in {TENANTS} tenants (1% each), file-backed"
            " (WAL, synchronous=FULL), all planes served by one `ratatoskr serve`; VMP"
            f" {self.prof.vmp_n:,} vectors of dim {a.vmp_dim}. Seeded over HTTP in batches of"
            f" {SEED_BATCH}: "
            + ", ".join(f"{r:,.0f} chunks/s (to {n:,})" for n, r in self.seed_rate.items())
            + f"; VMP {self.vmp_seed_rate:,.0f} upserts/s.",
            f"BLAS threads: {blas_threads()}. `ratatoskr serve --workers`:"
            f" {'present' if self.workers_ok else 'absent'}. CPU and RSS from {self.source}.",
            "",
            "## Sequential calls, one keep-alive connection",
            "",
            "One `httpx.Client`, calls back to back; ratatoskr and the floor alternate in blocks"
            " with the very same request bytes (body and headers; each token minted before the"
            " timed loop). The floor is a bare Starlette app on the same uvicorn, launched the"
            " same way (listening socket with IPPROTO_TCP), answering a pre-rendered body of"
            " ratatoskr's response size. *ratatoskr − floor* is what the provider adds to a bare"
            " HTTP round trip of those sizes; *CPU/req* is the server process's user + system"
            " time over the timed calls ÷ calls.",
            "",
            "| verb | calls | request B | response B | ratatoskr p50 / p99 ms | floor p50 / p99"
            " ms | ratatoskr − floor (p50) ms | ratio | ratatoskr CPU/req ms | floor CPU/req ms"
            " | errors |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in self.results:
            o50, f50 = pct(r.ours.lat, 50), pct(r.floor.lat, 50)
            lines.append(
                f"| {r.spec.label} | {r.ours.count} | {r.req_bytes:,} | {r.resp_bytes:,} |"
                f" {ms(o50)} / {ms(pct(r.ours.lat, 99))} | {ms(f50)} / {ms(pct(r.floor.lat, 99))}"
                f" | {ms(o50 - f50)} | {o50 / f50:.1f}× | {ms(r.ours.cpu_per_req())} |"
                f" {ms(r.floor.cpu_per_req())} | {r.ours.errors} / {r.floor.errors} |"
            )
        mint = [r.mint_s for r in self.results if r.spec.path == MEMORY_CALL]
        lines += [
            "",
            f"Client-side, excluded from the timings: building the envelope and minting its"
            f" token took {ms(pct(mint, 50))} ms per memory call (median over verbs).",
            "",
            "## HTTP against the store API",
            "",
            f"The same reads (same arguments, same order) through the store API in this"
            f" process after the server stopped ({self.store_open_note}). *HTTP − store* is the"
            " whole wire: HTTP, the Bifrost pipeline (token, envelope, grant) and rendering.",
            "",
            "| read | store p50 / p99 ms | HTTP p50 ms | HTTP − store (p50) ms | floor p50 ms |",
            "| --- | --- | --- | --- | --- |",
        ]
        for r in self.results:
            if r.store is None or r.spec.name == "upsert_100":
                continue
            s50, o50 = pct(r.store.lat, 50), pct(r.ours.lat, 50)
            lines.append(
                f"| {r.spec.label} | {ms(s50)} / {ms(pct(r.store.lat, 99))} | {ms(o50)} |"
                f" {ms(o50 - s50)} | {ms(pct(r.floor.lat, 50))} |"
            )
        up = next((r for r in self.results if r.spec.name == "upsert_100"), None)
        if up is not None and up.store is not None and up.ours.count:
            chunks = 100
            http_rate = chunks * up.ours.count / sum(up.ours.lat)
            store_rate = chunks * up.store.count / sum(up.store.lat)
            lines += [
                "",
                "## Upsert over HTTP against the store's own rate",
                "",
                f"One client, batches of {chunks} chunks of {DIM} dims"
                f" ({up.req_bytes / 1e6:.2f} MB of JSON each), back to back over HTTP; then the"
                " same batches through `upsert_many` of the store API in this process, on the"
                " same file opened as the server opens it (fresh idempotency keys: every batch"
                " a committed write).",
                "",
                "| path | batches | p50 ms | chunks/s | ratio to the store |",
                "| --- | --- | --- | --- | --- |",
                f"| HTTP | {up.ours.count} | {ms(pct(up.ours.lat, 50))} | {http_rate:,.0f} |"
                f" {http_rate / store_rate:.2f}× |",
                f"| store API | {up.store.count} | {ms(pct(up.store.lat, 50))} |"
                f" {store_rate:,.0f} | 1.00× |",
            ]
        lines += [
            "",
            "## Load: one-tenant searches, concurrent clients",
            "",
            f"{self.clients} client processes (each its own interpreter and keep-alive"
            " connection, tokens pre-minted), calls back to back. All servers of a row group"
            " are up at once (both ratatoskr servers on the same files); every round gives each"
            f" one slice of {self.prof.load_slice_s:g} s, in an order rotated round by round"
            f" ({self.prof.load_rounds} rounds), so background load falls on all alike. RSS is"
            " the peak sampled over the server's process tree (supervisor and workers summed);"
            " server CPU/req is the tree's CPU time ÷ requests, client CPU/req the load"
            f" clients' own (all {self.clients} summed) ÷ requests — on this machine the clients"
            " share the cores with the server, so req/s is bounded by both. The floor answers"
            " the search's response size; with 2 workers it runs under uvicorn's Multiprocess"
            " supervisor.",
            "",
            "| N | server | workers | requests | req/s | p50 ms | p99 ms | errors | server RSS MB |"
            " server CPU/req ms | client CPU/req ms | note |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for lr in self.loads:
            note = "; ".join(sorted(lr.notes))
            if lr.requests == 0:
                lines.append(
                    f"| {lr.n:,} | {lr.contender} | {lr.workers} | n/a | n/a | n/a |"
                    f" n/a | n/a | n/a | n/a | n/a | {note} |"
                )
                continue
            lines.append(
                f"| {lr.n:,} | {lr.contender} | {lr.workers} | {lr.requests:,} | {lr.rps:,.0f} |"
                f" {ms(pct(lr.lat, 50))} | {ms(pct(lr.lat, 99))} | {lr.errors} |"
                f" {lr.rss / 2**20:,.0f} | {ms(lr.per_req(lr.server_cpu_s))} |"
                f" {ms(lr.per_req(lr.client_cpu_s))} | {note} |"
            )
        lines += ["", *self.findings()]
        return "\n".join(lines) + "\n"

    def findings(self) -> list[str]:
        out = ["## Notes", ""]
        small = [r for r in self.results if r.resp_bytes < 4096 and r.req_bytes < 4096]
        stalled = [
            r.spec.name
            for r in small
            if pct(r.ours.lat, 50) - pct(r.floor.lat, 50) > NAGLE_MS / 1e3
        ]
        if stalled:
            out.append(
                f"- **~40 ms stall on small calls** ({', '.join(stalled)}): ratatoskr is"
                f" > {NAGLE_MS:.0f} ms behind the floor where both carry small bodies. That is"
                " the signature of Nagle's algorithm meeting the client's delayed ACK: under"
                " asyncio's loop, a listening socket made without IPPROTO_TCP leaves"
                " TCP_NODELAY off on accepted connections (the floor's socket has it)."
            )
        else:
            out.append(
                f"- No ~40 ms Nagle / delayed-ACK stall: every small call is within"
                f" {NAGLE_MS:.0f} ms of the floor."
            )
        loops = self.loops
        out.append(
            "- Event loop (uvloop's extension mapped in the server process or not): ratatoskr"
            f" {loops.get('ratatoskr', '?')}, floor {loops.get('floor', '?')} (the floor leaves"
            ' uvicorn\'s `loop="auto"`).'
            + (
                " uvloop sets TCP_NODELAY on every TCP connection whatever the listening"
                " socket's protocol, so the provider's IPPROTO_TCP socket fix is not what keeps"
                " the stall away here; the stall can only appear under asyncio's own loop."
                if loops.get("ratatoskr") == "uvloop"
                else ""
            )
        )
        errs = sum(r.ours.errors + r.floor.errors for r in self.results)
        errs += sum(lr.errors for lr in self.loads)
        out.append(f"- Errors (non-200 answers or transport errors): {errs} in all.")
        out.append(
            "- Upserts overwrite seeded chunk ids of one tenant (a new revision each), so the"
            " store holds exactly N chunks throughout; every write is a committed"
            " transaction (synchronous=FULL), so they include an fsync."
        )
        out += [f"- {n}" for n in self.notes]
        return out


def blas_threads() -> str:
    """The BLAS thread settings this run and its servers inherited."""
    names = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    set_ = [f"{n}={os.environ[n]}" for n in names if n in os.environ]
    return ", ".join(set_) if set_ else f"not limited (OpenBLAS default: {os.cpu_count()})"


def code_location() -> str:
    """Where ``ratatoskr.provider`` is imported from (PYTHONPATH can point at another tree)."""
    import ratatoskr.provider  # noqa: PLC0415

    where = Path(ratatoskr.provider.__file__).resolve().parents[4]  # …/packages
    with contextlib.suppress(ValueError):
        return f"{where.relative_to(ROOT)}/ of this checkout"
    return str(where)


def log(msg: str) -> None:
    print(f"[wire_bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--n", type=int, default=10_000, help="chunks in the store (default 10000)")
    p.add_argument(
        "--n-big",
        type=int,
        default=100_000,
        help="second store size for the load table (0: none; ignored with --quick)",
    )
    p.add_argument("--quick", action="store_true", help="N only, fewer calls (~2-3 min)")
    p.add_argument("--clients", type=int, default=8, help="load client processes (default 8)")
    p.add_argument("--vmp-dim", type=int, default=DIM, help="VMP plane dimension (default 384)")
    p.add_argument("--seed", type=int, default=20261201)
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="report path (default benchmarks/results/wire-<date>.md)",
    )
    args = p.parse_args(argv)
    if args.n < TENANTS:
        p.error(f"--n must be at least {TENANTS}")
    if args.out is None:
        suffix = "-quick" if args.quick else ""
        args.out = HERE / "results" / f"wire-{dt.date.today():%Y-%m-%d}{suffix}.md"
    return args


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def cleanup(bench: Bench) -> Iterator[None]:
    try:
        yield
    finally:
        for server in list(STARTED):
            server.stop()
        if bench.args.keep:
            log(f"kept {bench.tmp}")
        else:
            shutil.rmtree(bench.tmp, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _terminate)
    args = parse(argv)
    args.keep = os.environ.get("WIRE_BENCH_KEEP") == "1"
    bench = Bench(args)
    t0 = time.perf_counter()
    with cleanup(bench):
        bench.run()
    text = bench.report(time.perf_counter() - t0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    log(f"report written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
