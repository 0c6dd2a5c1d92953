"""Shared pieces of the reliability suite: provider processes, clients, sizes, the
invariants every database file must hold, and where measured figures go.

Sizes: each test has a quick size (``make test``) and a soak size (``make soak``);
``RELIABILITY_<NAME>`` in the environment overrides either, so a bounded run of any
size can be reproduced with the command recorded in docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw
import httpx

from bifrost.client import BifrostClient
from ratatoskr.provider.cli import main
from ratatoskr.provider.testing import ServerProcess
from ratatoskr.sqlite import ConnectionOptions, connect
from ratatoskr.vmp.client import VmpClient

from ..conftest import KEY, loopback_http, loopback_transport, start_server

VMP_KEY = "reliability-vmp-key-5f0e9a"
MEMORY_DIM = 8
VMP_DIM = 4
PLANES = ("memory", "affect", "vmp")


def size(name: str, quick: int, soak: int, *, soaking: bool) -> int:
    """The size of a run: ``RELIABILITY_<NAME>`` if set, else the quick or soak default."""
    value = os.environ.get(f"RELIABILITY_{name.upper()}")
    if value is not None:
        return int(value)
    return soak if soaking else quick


def report(name: str, figures: Mapping[str, Any]) -> None:
    """Print the figures of a run and, under ``RELIABILITY_REPORT_DIR``, keep them as JSON."""
    text = json.dumps(dict(figures), sort_keys=True)
    print(f"\nreliability {name}: {text}")
    out = os.environ.get("RELIABILITY_REPORT_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        Path(out, f"{name}.json").write_text(text + "\n")


def provider_env(root: Path, **extra: str) -> dict[str, str]:
    """Settings of a file-backed provider under ``root`` (any free loopback port)."""
    env = {
        "RATATOSKR_MEMORY_DB": str(root / "memory.db"),
        "RATATOSKR_AFFECT_DB": str(root / "affect.db"),
        "RATATOSKR_VMP_DB": str(root / "vmp.db"),
        "RATATOSKR_MEMORY_EMBEDDING_DIM": str(MEMORY_DIM),
        "RATATOSKR_VMP_DIM": str(VMP_DIM),
        "RATATOSKR_HEIMDALL_KEY": KEY,
        "RATATOSKR_VMP_API_KEY": VMP_KEY,
        "RATATOSKR_PORT": "0",
    }
    env.update(extra)
    return env


def launch(root: Path, env: Mapping[str, str], *args: str) -> ServerProcess:
    """``python -m ratatoskr.provider serve <args>`` on a free port (tests/conftest.py)."""
    return start_server(["serve", *args], dict(env), root)


@contextmanager
def running(root: Path, env: Mapping[str, str], *args: str) -> Iterator[ServerProcess]:
    """A provider for the block; SIGTERM at the end (SIGKILL if it does not stop within
    30 s), then whatever is left of its process group."""
    with launch(root, env, *args) as server:
        yield server


def base(server: ServerProcess, plane: str, *, combined: bool = True) -> str:
    return f"{server.base_url}/{plane}" if combined else server.base_url


def memory_client(
    url: str, *, scope: dict[str, str] | None = None, actor: str = "agent"
) -> BifrostClient:
    return BifrostClient(
        url,
        KEY.encode(),
        actor=actor,
        scope=scope or {},
        plane="memory",
        transport=loopback_transport(),
    )


def affect_client(
    url: str, *, scope: dict[str, str] | None = None, actor: str = "agent"
) -> BifrostClient:
    return BifrostClient(
        url,
        KEY.encode(),
        actor=actor,
        scope=scope or {},
        plane="affect",
        transport=loopback_transport(),
    )


def vmp_client(url: str) -> VmpClient:
    return VmpClient(url, VMP_KEY, transport=loopback_transport())


def http(timeout: float = 60) -> httpx.Client:
    return loopback_http(timeout=timeout)


# -- invariants of the files -----------------------------------------------------------


def _rows(conn: apsw.Connection, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in conn.execute(sql).fetchall()]


def _one(conn: apsw.Connection, sql: str) -> Any:
    return conn.execute(sql).fetchall()[0][0]


@contextmanager
def open_raw(path: str, *, vec: bool = False) -> Iterator[apsw.Connection]:
    """A plain connection with the house pragmas (what a restart opens)."""
    conn = connect(path, ConnectionOptions(load_vec=vec))
    try:
        yield conn
    finally:
        conn.close()


def check_memory_file(path: str) -> int:
    """Integrity, and chunk rows one-to-one with vec0 rows; returns the chunk count."""
    with open_raw(path, vec=True) as conn:
        assert _rows(conn, "PRAGMA integrity_check") == [("ok",)]
        chunks = int(_one(conn, "SELECT count(*) FROM memory_chunks"))
        vecs = int(_one(conn, "SELECT count(*) FROM memory_vec"))
        assert chunks == vecs, f"{chunks} chunk rows but {vecs} vec rows"
        orphans = _rows(
            conn,
            "SELECT chunk_id FROM memory_vec EXCEPT SELECT chunk_id FROM memory_chunks"
            " UNION ALL SELECT chunk_id FROM memory_chunks EXCEPT SELECT chunk_id FROM memory_vec",
        )
        assert orphans == [], f"{len(orphans)} ids in one table only"
        seq = int(_one(conn, "SELECT value FROM memory_counters WHERE name = 'seq'"))
        newest = _one(conn, "SELECT max(seq) FROM memory_chunks")
        assert newest is None or int(newest) <= seq
        return chunks


def check_affect_file(path: str) -> int:
    """Integrity; every current row points at its key's newest history row (``head``)
    and names the key by the id of its revision 1 (``key_id``); each key's history is
    revisions 1..current and no other history exists; the scope index holds exactly
    the current scopes. Returns the number of live keys (schema v2, see
    ``ratatoskr.affect.schema``)."""
    with open_raw(path) as conn:
        assert _rows(conn, "PRAGMA integrity_check") == [("ok",)]
        heads = _rows(
            conn,
            "SELECT c.key FROM affect_current c LEFT JOIN affect_history h ON h.id = c.head"
            " WHERE h.id IS NULL OR h.key_id IS NOT c.key_id OR h.revision IS NOT c.revision",
        )
        assert heads == [], f"{len(heads)} keys whose head is not their newest revision"
        mismatched = _rows(
            conn,
            "SELECT c.key FROM affect_current c LEFT JOIN"
            " (SELECT key_id, max(revision) AS top, count(*) AS n FROM affect_history"
            " GROUP BY key_id) h ON h.key_id = c.key_id"
            " WHERE h.top IS NOT c.revision OR h.n IS NOT c.revision",
        )
        assert mismatched == [], f"{len(mismatched)} keys whose history disagrees"
        firsts = _rows(
            conn,
            "SELECT c.key FROM affect_current c LEFT JOIN affect_history h"
            " ON h.key_id = c.key_id AND h.revision = 1 WHERE h.id IS NOT c.key_id",
        )
        assert firsts == []
        orphans = _one(
            conn,
            "SELECT count(*) FROM (SELECT DISTINCT key_id FROM affect_history"
            " EXCEPT SELECT key_id FROM affect_current)",
        )
        assert int(orphans) == 0
        index = {
            (str(a), str(v), str(k))
            for a, v, k in conn.execute("SELECT axis, value, key FROM affect_scope")
        }
        derived = set()
        for key, scope_json in conn.execute("SELECT key, scope_json FROM affect_current"):
            for axis, value in json.loads(str(scope_json)).items():
                derived.add((axis, value, str(key)))
        assert index == derived, "scope index disagrees with the current scopes"
        return int(_one(conn, "SELECT count(*) FROM affect_current"))


def check_vmp_file(path: str) -> int:
    """Integrity; ids contiguous and counters consistent, one chunk node and one edge
    per record. Returns the record count."""
    with open_raw(path) as conn:
        assert _rows(conn, "PRAGMA integrity_check") == [("ok",)]
        next_record, next_node = conn.execute(
            "SELECT next_record_id, next_node_id FROM vmp_state"
        ).fetchall()[0]
        records = int(_one(conn, "SELECT count(*) FROM vmp_records"))
        assert records == next_record
        assert int(_one(conn, "SELECT coalesce(max(record_id) + 1, 0) FROM vmp_records")) == records
        assert int(_one(conn, "SELECT count(*) FROM vmp_nodes")) == next_node
        assert int(_one(conn, "SELECT count(*) FROM vmp_nodes WHERE kind = 1")) == records
        assert int(_one(conn, "SELECT count(*) FROM vmp_edges")) == records
        return records


def check_files(env: Mapping[str, str]) -> dict[str, int]:
    """Every plane file's invariants (see the check_* functions); row counts by plane."""
    return {
        "memory": check_memory_file(env["RATATOSKR_MEMORY_DB"]),
        "affect": check_affect_file(env["RATATOSKR_AFFECT_DB"]),
        "vmp": check_vmp_file(env["RATATOSKR_VMP_DB"]),
    }


def file_bytes(path: str) -> bytes:
    return Path(path).read_bytes()


def wait_for(predicate: Any, timeout: float = 10.0, interval: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def dump_file(path: str) -> dict[str, list[str]]:
    """Every row of every real table (vec0's shadow tables included), as sorted reprs:
    equal dumps mean nothing was written."""
    with open_raw(path, vec=True) as conn:
        return dump_conn(conn)


def dump_conn(conn: apsw.Connection) -> dict[str, list[str]]:
    tables = [
        str(name)
        for name, sql in conn.execute("SELECT name, sql FROM sqlite_schema WHERE type = 'table'")
        if not str(sql).upper().startswith("CREATE VIRTUAL")
    ]
    return {t: sorted(repr(tuple(r)) for r in conn.execute(f'SELECT * FROM "{t}"')) for t in tables}


def refuse(root: Path, env: Mapping[str, str], *args: str) -> tuple[int, list[str]]:
    """Run ``ratatoskr serve <args>`` expecting a refusal: (exit status, stderr lines)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("RATATOSKR_")}
    full.update(env)
    proc = subprocess.run(
        [sys.executable, "-m", "ratatoskr.provider", "serve", *args],
        env=full,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode, proc.stderr.splitlines()


def refuse_in_process(
    monkeypatch: Any, capsys: Any, root: Path, env: Mapping[str, str], *args: str
) -> tuple[int, list[str]]:
    """``ratatoskr serve <args>`` through the CLI's ``main`` in this process, for start-up
    refusals only (a start that succeeds would serve forever): (exit status, stderr lines).
    The same code path as :func:`refuse`, without a new interpreter's import time."""
    for name in list(os.environ):
        if name.startswith("RATATOSKR_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(root)
    capsys.readouterr()
    umask = os.umask(0o022)
    os.umask(umask)
    try:
        code = main(["serve", *args])
    finally:
        os.umask(umask)
    return code, capsys.readouterr().err.splitlines()
